use evc::RegisteredEvent;

#[derive(evc::Event, serde::Serialize, serde::Deserialize)]
#[evc(event = "iu.born", version = "1.0.0")]
struct Born {
    iu_unit_id: uuid::Uuid,
    iu_version_id: uuid::Uuid,
    governance_state: String,
    born_at: chrono::DateTime<chrono::Utc>,
}

#[derive(evc::Event, serde::Serialize)]
#[evc(event = "iu.born", version = "1.1.0")]
struct BornWithRun {
    iu_unit_id: uuid::Uuid,
    #[serde(rename = "iu_version_id")]
    version: uuid::Uuid,
    governance_state: String,
    born_at: String,
    source_run_id: Option<uuid::Uuid>,
}

struct Notifier;

#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(&self) {}
    async fn on_step_escalated(&self) {}
    fn helper(&self) {}
}

fn main() {
    assert_eq!(Born::EVENT_TYPE, "iu.born");
    assert_eq!(BornWithRun::VERSION, "1.1.0");
    Notifier.helper();
}
