//! The group roles of the tenth runtime step, one per job (docs/runtime.md, "Roles"), and how
//! a connection takes one: as its `role` setting from the first statement on, so every
//! statement of the connection runs with that role's grants only. And the consumers a login's
//! dispatcher roles of consumers scope it to (the twenty-first step).

use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::{PgStore, sql};
use crate::store::DispatchError;

/// A job, by the group role the tenth runtime step grants what the job needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Reads status, dead letters, timelines and audit; no payload, no change.
    Reader,
    /// Appends events.
    Producer,
    /// Claims, settles and audits deliveries.
    Dispatcher,
    /// Reads payloads, pauses, resumes, sets modes, proposes replays and discards.
    Operator,
    /// Applies a replay or discard another person proposed.
    Approver,
    /// Purges the rows the retention periods expire (`evc purge`), and nothing else; created
    /// by the twenty-sixth step.
    Retention,
}

/// Whether a login can take a [`Role`] in a database ([`Role::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RoleCheck {
    /// The role exists, has its grants here, and the login may take it.
    Ready,
    /// No such role in the cluster (the migrating role could not create it).
    Missing,
    /// The role exists, but this database has none of its grants (not migrated to the tenth
    /// step, or migrated before the role existed).
    NotGranted,
    /// The login is not a member of the role.
    NotMember {
        /// The login.
        login: String,
    },
}

impl Role {
    /// Every role, in the order of the docs.
    pub const ALL: [Self; 6] = [
        Self::Reader,
        Self::Producer,
        Self::Dispatcher,
        Self::Operator,
        Self::Approver,
        Self::Retention,
    ];

    /// The group role's name, as the migrations create it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Reader => "evc_reader",
            Self::Producer => "evc_producer",
            Self::Dispatcher => "evc_dispatcher",
            Self::Operator => "evc_operator",
            Self::Approver => "evc_approver",
            Self::Retention => "evc_retention",
        }
    }

    /// `options` whose connections take this role when they open. A login that is not a
    /// member is refused at connect (`permission denied to set role`).
    pub fn connect_options(self, options: PgConnectOptions) -> PgConnectOptions {
        options.options([("role", self.name())])
    }

    /// Whether the login of `connection` can take this role in its database.
    pub async fn check(self, connection: &mut PgConnection) -> Result<RoleCheck, sqlx::Error> {
        let (exists, granted, member, login): (bool, bool, bool, String) =
            sqlx::query_as(sql::ROLE_CHECK)
                .bind(self.name())
                .fetch_one(connection)
                .await?;
        Ok(if !exists {
            RoleCheck::Missing
        } else if !granted {
            RoleCheck::NotGranted
        } else if !member {
            RoleCheck::NotMember { login }
        } else {
            RoleCheck::Ready
        })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PgStore {
    /// The consumers this store's login is scoped to by its dispatcher roles of consumers
    /// (docs/runtime.md, "A dispatcher role per consumer"), in name order: it claims and
    /// settles only their deliveries. `None` when the login is not scoped (it holds no
    /// consumer role, or it is a superuser), and on a database without the twenty-first
    /// runtime step.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn scoped_consumers(&self) -> Result<Option<Vec<String>>, DispatchError> {
        match sqlx::query_scalar::<_, Option<Vec<String>>>(sql::LOGIN_CONSUMERS)
            .fetch_one(&self.inner.pool)
            .await
        {
            Ok(consumers) => Ok(consumers.map(|mut consumers| {
                consumers.sort_unstable();
                consumers
            })),
            // No such function: the database predates the step, and nothing scopes a login.
            Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("42883") => {
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    }
}
