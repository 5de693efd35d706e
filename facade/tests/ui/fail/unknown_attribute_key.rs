#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", versoin = "1.0.0")]
struct Born {
    iu_unit_id: String,
}

fn main() {}
