use evc::{HandlerContext, HandlerError};
use evc_generated::payloads::{
    IuBornV1, IuDeprecatedV1, ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};

struct Notifier;

// A handler is an `async fn`.
#[evc::consumer("worker.notification.iu")]
impl Notifier {
    fn on_iu_born(&self, _: &mut HandlerContext<'_>, _: IuBornV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_iu_deprecated(&self, _: &mut HandlerContext<'_>, _: IuDeprecatedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_proposal_approved(&self, _: &mut HandlerContext<'_>, _: ProposalApprovedV1) -> Result<(), HandlerError> {
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
