//! How a PostgreSQL connection takes a [`TenantScope`]: as its `evc.tenant` setting from the
//! first statement on, so the row-level security policies of the eleventh runtime step see it
//! in every statement and no pooled connection ever serves two scopes.

use sqlx::postgres::PgConnectOptions;

use crate::tenant::TenantScope;

impl TenantScope {
    /// `options` whose connections work on this scope's rows. The setting is made at
    /// connection start rather than per transaction: no statement of a pooled connection can
    /// run before it, and it costs no round trip.
    pub fn connect_options(&self, options: PgConnectOptions) -> PgConnectOptions {
        options.options([("evc.tenant", self.setting())])
    }
}
