#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", version = "1.1.0")]
struct Born {
    iu_unit_id: String,
    iu_version_id: Option<String>,
    governance_state: String,
    born_at: String,
    source_run_id: String,
}

fn main() {}
