#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", version = "1.7.0")]
struct Born {
    iu_unit_id: String,
}

fn main() {}
