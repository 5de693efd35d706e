// `step.escalated` shares more letters in order with `step.eailed`; `step.failed` is one edit
// away, and the suggestion ranks by edits per dotted segment.
#[derive(evc::Event, serde::Serialize)]
#[evc(event = "step.eailed", version = "1.0.0")]
struct Failed {
    step_id: String,
}

fn main() {}
