use evc::{HandlerContext, HandlerError};
use evc_generated::payloads::{IuBornV1, ProposalApprovedV1, ProposalRejectedV1};

struct Notifier;

// `worker.notification.iu` also subscribes to iu.deprecated and step.escalated.
#[evc::consumer("worker.notification.iu")]
impl Notifier {
    async fn on_iu_born(&self, _: &mut HandlerContext<'_>, _: IuBornV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_proposal_approved(&self, _: &mut HandlerContext<'_>, _: ProposalApprovedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_proposal_rejected(&self, _: &mut HandlerContext<'_>, _: ProposalRejectedV1) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {}
