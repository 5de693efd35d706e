// iu.born orders its deliveries by `iu_unit_id`: a struct without it cannot be emitted.
#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", version = "1.0.0")]
struct Born {
    iu_version_id: String,
    governance_state: String,
    born_at: String,
}

fn main() {}
