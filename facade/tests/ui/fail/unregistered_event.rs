#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.bron", version = "1.0.0")]
struct Born {
    iu_unit_id: String,
}

fn main() {}
