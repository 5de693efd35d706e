//! The valid uses of the evc macros compile, in an ordinary test (built with the rest of the
//! suite, so it shares its dependency artifacts); the invalid ones are pinned with trybuild in
//! `tests/ui.rs`. The cases read the repository's contracts (`.cargo/config.toml` sets
//! `EVC_CONTRACTS_DIR`).

use evc::RegisteredEvent;
use evc_generated::payloads::{
    IuDeprecatedV1, ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};

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

#[derive(Default)]
struct Notifier {
    born: std::sync::Mutex<Vec<uuid::Uuid>>,
}

// Derived structs and generated payload types are both handler payloads.
#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(
        &self,
        _cx: &mut evc::HandlerContext<'_>,
        payload: Born,
    ) -> Result<(), evc::HandlerError> {
        self.born
            .lock()
            .map_err(|_| evc::HandlerError::transient("poisoned"))?
            .push(payload.iu_unit_id);
        Ok(())
    }

    async fn on_iu_deprecated(
        &self,
        _cx: &mut evc::HandlerContext<'_>,
        _payload: IuDeprecatedV1,
    ) -> Result<(), evc::HandlerError> {
        Ok(())
    }

    async fn on_proposal_approved(
        &self,
        _cx: &mut evc::HandlerContext<'_>,
        _payload: ProposalApprovedV1,
    ) -> Result<(), evc::HandlerError> {
        Ok(())
    }

    async fn on_proposal_rejected(
        &self,
        _cx: &mut evc::HandlerContext<'_>,
        _payload: ProposalRejectedV1,
    ) -> Result<(), evc::HandlerError> {
        Ok(())
    }

    async fn on_step_escalated(
        &self,
        _cx: &mut evc::HandlerContext<'_>,
        _payload: StepEscalatedV1,
    ) -> Result<(), evc::HandlerError> {
        Ok(())
    }

    fn helper(&self) -> &'static str {
        "helper"
    }
}

#[test]
fn derived_events_and_consumer_impls_compile_and_carry_their_registration() {
    assert_eq!(Born::EVENT_TYPE, "iu.born");
    assert_eq!(Born::VERSION, "1.0.0");
    assert_eq!(
        (BornWithRun::EVENT_TYPE, BornWithRun::VERSION),
        ("iu.born", "1.1.0")
    );

    let id = uuid::Uuid::nil();
    let born = Born {
        iu_unit_id: id,
        iu_version_id: id,
        governance_state: "draft".to_owned(),
        born_at: chrono::DateTime::UNIX_EPOCH,
    };
    let json = serde_json::to_value(&born).expect("serializes");
    let back: Born = serde_json::from_value(json.clone()).expect("deserializes");
    assert_eq!(back.governance_state, born.governance_state);
    assert_eq!(
        (back.iu_unit_id, back.iu_version_id, back.born_at),
        (id, id, born.born_at)
    );

    // serde's rename is what the contract sees.
    let with_run = BornWithRun {
        iu_unit_id: id,
        version: id,
        governance_state: "draft".to_owned(),
        born_at: "2026-01-01T00:00:00Z".to_owned(),
        source_run_id: None,
    };
    let json = serde_json::to_value(&with_run).expect("serializes");
    assert!(json.get("iu_version_id").is_some(), "{json}");
    assert_eq!(json["born_at"], with_run.born_at.as_str());
    assert_eq!(json["iu_unit_id"], with_run.iu_unit_id.to_string().as_str());
    assert!(json["source_run_id"].is_null());

    // The consumer attribute keeps the impl's methods and serves the type as its consumer.
    assert_eq!(Notifier::default().helper(), "helper");
    assert_eq!(<Notifier as evc::Consumer>::NAME, "worker.notification.iu");
    fn served<C: evc::Consumer>(_: &C) {}
    served(&Notifier::default());
}
