#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", version = "1.0.0")]
struct Born {
    iu_unit_id: String,
    governance_state: String,
}

fn main() {}
