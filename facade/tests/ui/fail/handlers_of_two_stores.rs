use evc::{HandlerContext, HandlerError, PgStore, SqliteStore};
use evc_generated::payloads::{
    IuBornV1, IuDeprecatedV1, ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};

struct Notifier;

// One block serves one store: its handlers' contexts name the same one.
#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(&self, _: &mut HandlerContext<'_, SqliteStore>, _: IuBornV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_iu_deprecated(&self, _: &mut HandlerContext<'_, PgStore>, _: IuDeprecatedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_proposal_approved(&self, _: &mut HandlerContext<'_, SqliteStore>, _: ProposalApprovedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_proposal_rejected(&self, _: &mut HandlerContext<'_, SqliteStore>, _: ProposalRejectedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_step_escalated(&self, _: &mut HandlerContext<'_, SqliteStore>, _: StepEscalatedV1) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
