#[derive(evc::Event)]
#[evc(event = "iu.bron", version = "1.0.0")]
struct Born {
    iu_unit_id: String,
}

fn main() {}
