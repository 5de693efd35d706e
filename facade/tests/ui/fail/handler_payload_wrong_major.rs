use evc::{HandlerContext, HandlerError};
use evc_generated::payloads::{
    IuBornV2, IuDeprecatedV1, ProposalApprovedV1, ProposalRejectedV1, StepEscalatedV1,
};

struct Notifier;

// The consumer subscribes to iu.born@^1: a major 2 payload type never fits.
#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(&self, _: &mut HandlerContext<'_>, _: IuBornV2) -> Result<(), HandlerError> {
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
