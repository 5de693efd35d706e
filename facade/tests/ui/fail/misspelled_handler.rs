use evc::{HandlerContext, HandlerError};
use evc_generated::payloads::{
    IuBornV1, IuDeprecatedV1, ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};

struct Notifier;

// A misspelled handler gets the subscribed name it is closest to.
#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(&self, _: &mut HandlerContext<'_>, _: IuBornV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_iu_deprecated(&self, _: &mut HandlerContext<'_>, _: IuDeprecatedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_proposal_aproved(&self, _: &mut HandlerContext<'_>, _: ProposalApprovedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_proposal_rejected(&self, _: &mut HandlerContext<'_>, _: ProposalRejectedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_step_escalated(&self, _: &mut HandlerContext<'_>, _: StepEscalatedV1) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
