use evc::{HandlerContext, HandlerError};
use evc_generated_fixtures::base::consumers::{Audit, Handlers};
use evc_generated_fixtures::base::payloads::{JobFailedV1, UnitCreatedV1};

struct Auditor;

impl Audit for Auditor {
    async fn on_job_failed(&self, _: &mut HandlerContext<'_>, _: JobFailedV1) -> Result<(), HandlerError> {
        Ok(())
    }
    async fn on_unit_created(&self, _: &mut HandlerContext<'_>, _: UnitCreatedV1) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn main() {
    // `worker.indexer` is a live consumer of the base fixture: leaving its handler out does not
    // compile.
    let _handlers = Handlers { audit: Auditor };
}
