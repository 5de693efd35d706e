#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", version = "1.0.0")]
struct Born {
    iu_unit_id: u64,
    iu_version_id: String,
    governance_state: bool,
    born_at: String,
}

fn main() {}
