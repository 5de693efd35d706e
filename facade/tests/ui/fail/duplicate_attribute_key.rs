#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", event = "iu.edited", version = "1.0.0")]
struct Born {
    iu_unit_id: String,
    iu_version_id: String,
    governance_state: String,
    born_at: String,
}

fn main() {}
