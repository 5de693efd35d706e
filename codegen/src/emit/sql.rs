//! SQL migrations for the runtime tables and the registry rows, rendered from the runtime's own
//! schema templates (askama) in `runtime/migrations/postgres/`, one file per row of [`STEPS`].
//! The runtime crate owns those files because its statements (`store/postgres/sql.rs`) depend
//! on them; this crate reads them at compile time and never depends on the runtime
//! (docs/design.md, "The runtime owns its schema").
//!
//! These files go to `<crate>/migrations/`, named the way `sqlx::migrate!` and sqlx-cli read
//! them (`<version>_<description>.sql`):
//!
//! - `0001_evc_runtime.sql`: the runtime tables (docs/runtime.md, "Runtime schema"), all
//!   `IF NOT EXISTS`.
//! - `NNNN_evc_runtime_v2.sql`: the second step of the runtime tables (leaner indexes and
//!   constraints for batched dispatch and bulk appends; docs/design.md). A checked-in file for
//!   the step keeps its name; otherwise it numbers after the highest file checked in, so it
//!   lands after an application's own migrations as a later step must.
//! - `NNNN_evc_runtime_v3.sql`: the third step (replay generations, shadow-mode
//!   reconciliation rows, stale-token counts), named the same way.
//! - `NNNN_evc_runtime_v4.sql`: the fourth step (the lease index that leaves fenced statements
//!   to the primary key, for acks that delete), named the same way.
//! - `NNNN_evc_runtime_v5.sql`: the fifth step (append-only ledgers with an audited retention
//!   purge, and the payload hard cap of the project file as a constraint), named the same way.
//! - `NNNN_evc_runtime_v6.sql`: the sixth step (discarded deliveries and the discard audit
//!   table), named the same way.
//! - `NNNN_evc_runtime_v7.sql`: the seventh step (the settings table of the registry mirror,
//!   and the heartbeat columns that say where a worker's settings came from), named the same
//!   way.
//! - `NNNN_evc_runtime_v8.sql`: the eighth step (replay and discard idempotency keys scoped
//!   per consumer), named the same way.
//! - `NNNN_evc_runtime_v9.sql`: the ninth step (recorded plans and the two-person rule of
//!   replay and discard), named the same way.
//! - `NNNN_evc_runtime_v10.sql`: the tenth step (one group role per job with its grants),
//!   named the same way.
//! - `NNNN_evc_runtime_v11.sql`: the eleventh step (tenants: row-level security policies
//!   keyed on the session's tenant, in force while the contracts require a tenant scope),
//!   named the same way.
//! - `NNNN_evc_runtime_v12.sql`: the twelfth step (a settled delivery leaves its status only
//!   with its replay's or discard's audit row, and its row only through a purge), named the
//!   same way.
//! - `NNNN_evc_runtime_v13.sql`: the thirteenth step (a recorded plan is applied once), named
//!   the same way.
//! - `NNNN_evc_runtime_v14.sql`: the fourteenth step (an idempotency key is scoped per producer
//!   class and tenant), named the same way.
//! - `NNNN_evc_runtime_v15.sql`: the fifteenth step (an effect key is scoped per consumer and
//!   tenant), named the same way.
//! - `NNNN_evc_runtime_v16.sql`: the sixteenth step (a replay's or discard's idempotency key is
//!   scoped per consumer and tenant), named the same way.
//! - `NNNN_evc_runtime_v17.sql`: the seventeenth step (the audit of who paused, resumed or set
//!   the mode of a consumer, and why), named the same way.
//! - `NNNN_evc_runtime_v18.sql`: the eighteenth step (each event records the transaction that
//!   wrote it, for the event feed), named the same way.
//! - `NNNN_evc_runtime_v19.sql`: the nineteenth step (the relay's fenced cursors), named the
//!   same way.
//! - `NNNN_evc_runtime_v20.sql`: the twentieth step (what a relay cursor reports: events
//!   passed, publish rate, failed rounds), named the same way.
//! - `NNNN_evc_runtime_v21.sql`: the twenty-first step (a dispatcher role per consumer, scoping
//!   the logins granted it to that consumer's deliveries), named the same way.
//! - `NNNN_evc_runtime_v22.sql`: the twenty-second step (executor classes in the registry
//!   mirror), named the same way.
//! - `NNNN_evc_runtime_v23.sql`: the twenty-third step (where each schedule stands), named the
//!   same way.
//! - `NNNN_evc_runtime_v24.sql`: the twenty-fourth step (lag breaches), named the same way.
//! - `NNNN_evc_runtime_v25.sql`: the twenty-fifth step (the cut-over gate of shadow mode),
//!   named the same way.
//! - `NNNN_evc_runtime_v26.sql`: the twenty-sixth step (retention: the purge of expired rows
//!   and its role), named the same way.
//! - `NNNN_evc_runtime_v27.sql`: the twenty-seventh step (inventory rules in the settings
//!   row), named the same way.
//! - `NNNN_evc_runtime_v28.sql`: the twenty-eighth step (applying an inventory: its plans,
//!   applies and items), named the same way.
//! - `NNNN_evc_runtime_v29.sql`: the twenty-ninth step (usage evidence recorded
//!   periodically: the recording in the settings row and the snapshots), named the same way.
//! - `NNNN_evc_runtime_v30.sql`: the thirtieth step (the payload hard cap checked after the
//!   insert, so that `COPY` writes events in batches), named the same way.
//! - `NNNN_evc_runtime_v31.sql`: the thirty-first step (one audit row per acked batch),
//!   named the same way.
//! - `NNNN_evc_runtime_v32.sql`: the thirty-second step (autovacuum on the deliveries
//!   unthrottled), named the same way.
//! - `NNNN_evc_registry_<digest12>.sql`: idempotent upserts of the registry rows, where
//!   `<digest12>` starts the registry digest ([`manifest::registry_digest`]). Its rows are
//!   rendered from [`manifest::registry`], the very data the digest covers, so one digest always
//!   renders one content. When a file for the current digest is already checked in, that name is
//!   rendered again; otherwise the number follows the highest one checked in.
//! - `NNNN_evc_settings_<digest12>.sql`: the upsert of the project's runtime settings (the
//!   `settings` of registry.json, outside the registry digest), where `<digest12>` starts the
//!   settings digest ([`settings_digest`]); named as the registry file is, after it. A file of
//!   its own because the settings change without the registry: a registry file, named after
//!   the registry digest, must render the same content for the same digest.
//!
//! Migrations never remove data: nothing here runs a `DELETE` (the fifth step only defines the
//! purge functions that do, for an operator to call), and a later runtime step drops
//! only indexes and constraints that an earlier step created.

use std::path::Path;

use serde::Serialize;

use super::manifest::{self, Registry};
use super::{Artifact, EmitError, Layout, MIGRATION_NOTICE};
use crate::digest;
use crate::duration;
use crate::model::ContractSet;

/// File name of the runtime-tables migration.
pub const RUNTIME_MIGRATION: &str = "0001_evc_runtime.sql";

/// The file name of the runtime tables' second step, after its version.
pub const RUNTIME_V2_SUFFIX: &str = "_evc_runtime_v2.sql";

/// The file name of the runtime tables' third step, after its version.
pub const RUNTIME_V3_SUFFIX: &str = "_evc_runtime_v3.sql";

/// The file name of the runtime tables' fourth step, after its version.
pub const RUNTIME_V4_SUFFIX: &str = "_evc_runtime_v4.sql";

/// The file name of the runtime tables' fifth step, after its version.
pub const RUNTIME_V5_SUFFIX: &str = "_evc_runtime_v5.sql";

/// The file name of the runtime tables' sixth step, after its version.
pub const RUNTIME_V6_SUFFIX: &str = "_evc_runtime_v6.sql";

/// The file name of the runtime tables' seventh step, after its version.
pub const RUNTIME_V7_SUFFIX: &str = "_evc_runtime_v7.sql";

/// The file name of the runtime tables' eighth step, after its version.
pub const RUNTIME_V8_SUFFIX: &str = "_evc_runtime_v8.sql";

/// The file name of the runtime tables' ninth step, after its version.
pub const RUNTIME_V9_SUFFIX: &str = "_evc_runtime_v9.sql";

/// The file name of the runtime tables' tenth step, after its version.
pub const RUNTIME_V10_SUFFIX: &str = "_evc_runtime_v10.sql";

/// The file name of the runtime tables' eleventh step, after its version.
pub const RUNTIME_V11_SUFFIX: &str = "_evc_runtime_v11.sql";

/// The file name of the runtime tables' twelfth step, after its version.
pub const RUNTIME_V12_SUFFIX: &str = "_evc_runtime_v12.sql";

/// The file name of the runtime tables' thirteenth step, after its version.
pub const RUNTIME_V13_SUFFIX: &str = "_evc_runtime_v13.sql";

/// The file name of the runtime tables' fourteenth step, after its version.
pub const RUNTIME_V14_SUFFIX: &str = "_evc_runtime_v14.sql";

/// The file name of the runtime tables' fifteenth step, after its version.
pub const RUNTIME_V15_SUFFIX: &str = "_evc_runtime_v15.sql";

/// The file name of the runtime tables' sixteenth step, after its version.
pub const RUNTIME_V16_SUFFIX: &str = "_evc_runtime_v16.sql";

/// The file name of the runtime tables' seventeenth step, after its version.
pub const RUNTIME_V17_SUFFIX: &str = "_evc_runtime_v17.sql";

/// The file name of the runtime tables' eighteenth step, after its version.
pub const RUNTIME_V18_SUFFIX: &str = "_evc_runtime_v18.sql";

/// The file name of the runtime tables' nineteenth step, after its version.
pub const RUNTIME_V19_SUFFIX: &str = "_evc_runtime_v19.sql";

/// The file name of the runtime tables' twentieth step, after its version.
pub const RUNTIME_V20_SUFFIX: &str = "_evc_runtime_v20.sql";

/// The file name of the runtime tables' twenty-first step, after its version.
pub const RUNTIME_V21_SUFFIX: &str = "_evc_runtime_v21.sql";

/// The file name of the runtime tables' twenty-second step, after its version.
pub const RUNTIME_V22_SUFFIX: &str = "_evc_runtime_v22.sql";

/// The file name of the runtime tables' twenty-third step, after its version.
pub const RUNTIME_V23_SUFFIX: &str = "_evc_runtime_v23.sql";

/// The file name of the runtime tables' twenty-fourth step, after its version.
pub const RUNTIME_V24_SUFFIX: &str = "_evc_runtime_v24.sql";

/// The file name of the runtime tables' twenty-fifth step, after its version.
pub const RUNTIME_V25_SUFFIX: &str = "_evc_runtime_v25.sql";

/// The file name of the runtime tables' twenty-sixth step, after its version.
pub const RUNTIME_V26_SUFFIX: &str = "_evc_runtime_v26.sql";

/// The file name of the runtime tables' twenty-seventh step, after its version.
pub const RUNTIME_V27_SUFFIX: &str = "_evc_runtime_v27.sql";

/// The file name of the runtime tables' twenty-eighth step, after its version.
pub const RUNTIME_V28_SUFFIX: &str = "_evc_runtime_v28.sql";

/// The file name of the runtime tables' twenty-ninth step, after its version.
pub const RUNTIME_V29_SUFFIX: &str = "_evc_runtime_v29.sql";

/// The file name of the runtime tables' thirtieth step, after its version.
pub const RUNTIME_V30_SUFFIX: &str = "_evc_runtime_v30.sql";

/// The file name of the runtime tables' thirty-first step, after its version.
pub const RUNTIME_V31_SUFFIX: &str = "_evc_runtime_v31.sql";

/// The file name of the runtime tables' thirty-second step, after its version.
pub const RUNTIME_V32_SUFFIX: &str = "_evc_runtime_v32.sql";

/// What registry migration file names contain before the digest prefix.
const REGISTRY_INFIX: &str = "_evc_registry_";

/// What settings migration file names contain before the digest prefix.
const SETTINGS_INFIX: &str = "_evc_settings_";

/// Hex digits of the registry digest in a registry migration's file name.
const DIGEST_PREFIX_LEN: usize = 12;

/// Where [`EmitError::Serialize`] says a bad value was headed.
const REGISTRY_DOCUMENT: &str = "registry migration";

/// The [`Source`] of the template file `$file`: askama compiles a template into a type, so each
/// file gets a one-field type that reads every name of [`Inputs`] through `Deref`.
macro_rules! template {
    ($file:literal) => {
        Source {
            file: $file,
            render: {
                #[derive(askama::Template)]
                #[template(path = $file, escape = "none")]
                struct File<'a>(&'a Inputs);

                impl std::ops::Deref for File<'_> {
                    type Target = Inputs;

                    fn deref(&self) -> &Inputs {
                        self.0
                    }
                }

                |inputs| askama::Template::render(&File(inputs))
            },
        }
    };
}

/// Every migration `evc generate` writes, in order: how its file is named, its template and what
/// it renders with. A new runtime step is one more row here and one more file in
/// `runtime/migrations/postgres/`; checked-in files never change (`tests/migration_checksums.rs`).
const STEPS: &[Step] = &[
    Step {
        name: Name::Fixed(RUNTIME_MIGRATION),
        template: template!("evc_runtime.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V2_SUFFIX),
        template: template!("evc_runtime_v2.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V3_SUFFIX),
        template: template!("evc_runtime_v3.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V4_SUFFIX),
        template: template!("evc_runtime_v4.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V5_SUFFIX),
        template: template!("evc_runtime_v5.sql"),
        with: With::PayloadCap,
    },
    Step {
        name: Name::Step(RUNTIME_V6_SUFFIX),
        template: template!("evc_runtime_v6.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V7_SUFFIX),
        template: template!("evc_runtime_v7.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V8_SUFFIX),
        template: template!("evc_runtime_v8.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V9_SUFFIX),
        template: template!("evc_runtime_v9.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V10_SUFFIX),
        template: template!("evc_runtime_v10.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V11_SUFFIX),
        template: template!("evc_runtime_v11.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V12_SUFFIX),
        template: template!("evc_runtime_v12.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V13_SUFFIX),
        template: template!("evc_runtime_v13.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V14_SUFFIX),
        template: template!("evc_runtime_v14.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V15_SUFFIX),
        template: template!("evc_runtime_v15.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V16_SUFFIX),
        template: template!("evc_runtime_v16.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V17_SUFFIX),
        template: template!("evc_runtime_v17.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V18_SUFFIX),
        template: template!("evc_runtime_v18.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V19_SUFFIX),
        template: template!("evc_runtime_v19.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V20_SUFFIX),
        template: template!("evc_runtime_v20.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V21_SUFFIX),
        template: template!("evc_runtime_v21.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V22_SUFFIX),
        template: template!("evc_runtime_v22.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V23_SUFFIX),
        template: template!("evc_runtime_v23.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V24_SUFFIX),
        template: template!("evc_runtime_v24.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V25_SUFFIX),
        template: template!("evc_runtime_v25.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V26_SUFFIX),
        template: template!("evc_runtime_v26.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V27_SUFFIX),
        template: template!("evc_runtime_v27.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V28_SUFFIX),
        template: template!("evc_runtime_v28.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V29_SUFFIX),
        template: template!("evc_runtime_v29.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V30_SUFFIX),
        template: template!("evc_runtime_v30.sql"),
        with: With::PayloadCap,
    },
    Step {
        name: Name::Step(RUNTIME_V31_SUFFIX),
        template: template!("evc_runtime_v31.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Step(RUNTIME_V32_SUFFIX),
        template: template!("evc_runtime_v32.sql"),
        with: With::Notice,
    },
    Step {
        name: Name::Digest(REGISTRY_INFIX),
        template: template!("evc_registry.sql"),
        with: With::Registry,
    },
    Step {
        name: Name::Digest(SETTINGS_INFIX),
        template: template!("evc_settings.sql"),
        with: With::Settings,
    },
];

/// One row of [`STEPS`].
struct Step {
    /// How the file is named.
    name: Name,
    /// The template that renders it.
    template: Source,
    /// What the template renders with.
    with: With,
}

/// How a migration file is named.
#[derive(Clone, Copy)]
enum Name {
    /// Always this name (the first runtime step, which every crate has as `0001`).
    Fixed(&'static str),
    /// The file ending with this suffix, by [`step_file_name`].
    Step(&'static str),
    /// `NNNN<infix><digest12>.sql` after the digest of what it renders, by the rules of
    /// [`registry_file_name`].
    Digest(&'static str),
}

/// What a step's template renders with, besides the notice: which fields of [`Inputs`] are
/// filled in for it.
#[derive(Clone, Copy)]
enum With {
    /// The notice only.
    Notice,
    /// The append-only tables and `payload_policy.hard_max_bytes` of the project file.
    PayloadCap,
    /// The registry rows and the registry digest.
    Registry,
    /// The settings row and the settings digest.
    Settings,
}

/// A template file of `runtime/migrations/postgres/` (the directory `codegen/askama.toml`
/// names), compiled into a function of [`Inputs`].
struct Source {
    /// The file name, for errors.
    file: &'static str,
    /// Renders the file.
    render: fn(&Inputs) -> askama::Result<String>,
}

/// Everything a template may read; a step's [`With`] says which fields are filled in, the
/// others stay empty.
#[derive(Default)]
struct Inputs {
    /// The generated-file notice of the first line.
    notice: &'static str,
    /// `payload_policy.hard_max_bytes` of the project file: the cap the runtime's payload
    /// policy mirrors ([`With::PayloadCap`]).
    hard_max_bytes: u32,
    /// The full registry or settings digest, hex (safe in a comment).
    digest: String,
    /// The digest as a SQL literal ([`With::Registry`]).
    digest_literal: String,
    /// The registry rows ([`With::Registry`]).
    registry: RegistryRows,
    /// The settings row, in the settings template's column order ([`With::Settings`]).
    settings: Row,
    /// The schedules, the lag thresholds and the settings digest that records them, as SQL
    /// expressions; empty for a project without either ([`With::Settings`]).
    scheduling: Row,
    /// The cut-over gates and the settings digest that records them, as SQL expressions;
    /// empty for a project without any ([`With::Settings`]).
    gates: Row,
    /// The retention periods and the settings digest that records them, as SQL expressions;
    /// empty for a project without any ([`With::Settings`]).
    retention: Row,
    /// The inventory rules and the settings digest that records them, as SQL expressions;
    /// empty for a project whose consumers declare none ([`With::Settings`]).
    inventory: Row,
    /// The evidence recording and the settings digest that records it, as SQL expressions;
    /// empty for a project that records none ([`With::Settings`]).
    evidence: Row,
}

impl Inputs {
    /// What `with` renders with for `set`.
    fn new(with: With, set: &ContractSet) -> Result<Self, EmitError> {
        let notice = MIGRATION_NOTICE;
        Ok(match with {
            With::Notice => Self {
                notice,
                ..Self::default()
            },
            With::PayloadCap => Self {
                notice,
                hard_max_bytes: set.project.payload_policy.hard_max_bytes,
                ..Self::default()
            },
            With::Registry => {
                let digest = manifest::registry_digest(set)?;
                Self {
                    notice,
                    digest_literal: literal(&digest)?,
                    registry: registry_rows(&manifest::registry(set), &digest)?,
                    digest,
                    ..Self::default()
                }
            }
            With::Settings => {
                let digest = settings_digest(set)?;
                Self {
                    notice,
                    settings: settings_row(set, &digest)?,
                    scheduling: scheduling_row(set, &digest)?,
                    gates: gates_row(set, &digest)?,
                    retention: retention_row(set, &digest)?,
                    inventory: inventory_row(set, &digest)?,
                    evidence: evidence_row(set, &digest)?,
                    digest,
                    ..Self::default()
                }
            }
        })
    }
}

/// One row of an upsert: SQL expressions, already quoted, in the order of the template's
/// column list. The templates (`evc_registry.sql`, `evc_settings.sql`) name the tables and
/// columns: the runtime's schema is the runtime's.
type Row = Vec<String>;

/// The registry rows, one list per table of `evc_registry.sql`, each in that template's column
/// order; a table without rows gets no statement (`INSERT ... VALUES` needs one).
#[derive(Default)]
struct RegistryRows {
    retry_policies: Vec<Row>,
    event_types: Vec<Row>,
    event_versions: Vec<Row>,
    executor_classes: Vec<Row>,
    consumers: Vec<Row>,
    /// `(consumer, class)` of each consumer that names an executor class.
    consumer_classes: Vec<Row>,
    subscriptions: Vec<Row>,
}

/// Renders the migrations `evc generate` adds to `<crate>/migrations/`: the runtime tables and
/// the registry rows of `set`, one file per row of [`STEPS`].
///
/// # Errors
/// [`EmitError::Template`] when a template fails; [`EmitError::Serialize`] when a registry value
/// cannot be written as SQL (a NUL character, which PostgreSQL text cannot hold).
pub fn render(set: &ContractSet, layout: &Layout) -> Result<Vec<Artifact>, EmitError> {
    let dir = layout.crate_dir.join("migrations");
    // Each file numbers after the files before it when it is new (a fresh crate), so the
    // runtime steps come first and the registry and settings files after them.
    let mut present = layout.existing_migrations.clone();
    let mut artifacts = Vec::with_capacity(STEPS.len());
    for step in STEPS {
        let inputs = Inputs::new(step.with, set)?;
        let contents = (step.template.render)(&inputs).map_err(|source| EmitError::Template {
            template: step.template.file,
            source,
        })?;
        let name = match step.name {
            Name::Fixed(name) => name.to_owned(),
            Name::Step(suffix) => step_file_name(suffix, &present),
            Name::Digest(infix) => digest_file_name(infix, &inputs.digest, &present),
        };
        present.push(name.clone());
        artifacts.push(Artifact {
            path: dir.join(name),
            contents: with_final_newline(contents),
        });
    }
    Ok(artifacts)
}

/// The registry migration's file name for `digest`, given the migration files already present.
///
/// A present file for the same digest (`*_evc_registry_<digest12>.sql`) is named again, so
/// regenerating an unchanged registry changes nothing; otherwise the version is one more than
/// the highest present (and at least 2, after the runtime tables), zero-padded to four digits.
pub fn registry_file_name(digest: &str, existing: &[String]) -> String {
    digest_file_name(REGISTRY_INFIX, digest, existing)
}

/// The settings migration's file name for the settings `digest`, given the migration files
/// already present: named as [`registry_file_name`] names registry files
/// (`NNNN_evc_settings_<digest12>.sql`).
pub fn settings_file_name(digest: &str, existing: &[String]) -> String {
    digest_file_name(SETTINGS_INFIX, digest, existing)
}

/// The digest of the project's runtime settings: SHA-256 of the canonical JSON of
/// registry.json's `settings`.
///
/// # Errors
/// [`EmitError::Serialize`] when the settings do not serialize.
pub fn settings_digest(set: &ContractSet) -> Result<String, EmitError> {
    let value =
        serde_json::to_value(manifest::settings(set)).map_err(|error| EmitError::Serialize {
            document: REGISTRY_DOCUMENT,
            message: error.to_string(),
        })?;
    Ok(digest::json_digest(&value))
}

/// The file name of a migration named after a digest (`<version><infix><digest12>.sql`).
fn digest_file_name(infix: &str, digest: &str, existing: &[String]) -> String {
    let short = digest.get(..DIGEST_PREFIX_LEN).unwrap_or(digest);
    let suffix = format!("{infix}{short}.sql");
    let names = existing.iter().map(|name| {
        Path::new(name)
            .file_name()
            .and_then(|file| file.to_str())
            .unwrap_or(name)
    });
    // Reuse a file only when it is the newest of its kind: after A -> B -> A the database
    // holds B, so A must be applied again under a new number.
    let newest_registry = names
        .clone()
        .filter(|name| name.contains(infix))
        .filter_map(|name| version_of(name).map(|version| (version, name)))
        .max();
    if let Some((_, name)) = newest_registry
        && name.ends_with(&suffix)
    {
        return name.to_owned();
    }
    let highest = names.filter_map(version_of).max().unwrap_or(0).max(1);
    format!("{:04}{suffix}", highest.saturating_add(1))
}

/// The file name of a runtime step whose name ends with `suffix`, given the migration files
/// already present: the present file for the step keeps its name; otherwise the version is one
/// more than the highest present (and at least 2, after the runtime tables), zero-padded to four
/// digits.
pub fn step_file_name(suffix: &str, existing: &[String]) -> String {
    let names = existing.iter().map(|name| {
        Path::new(name)
            .file_name()
            .and_then(|file| file.to_str())
            .unwrap_or(name)
    });
    if let Some(name) = names
        .clone()
        .find(|name| name.ends_with(suffix) && version_of(name).is_some())
    {
        return name.to_owned();
    }
    let highest = names.filter_map(version_of).max().unwrap_or(0).max(1);
    format!("{:04}{suffix}", highest.saturating_add(1))
}

/// The version of a migration file name (`0003_x.sql` is 3), as sqlx reads it: the digits
/// before the first `_`.
fn version_of(name: &str) -> Option<u64> {
    let (version, _) = name.split_once('_')?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    version.parse().ok()
}

/// The registry rows of `registry`, each table's in its template's column order.
fn registry_rows(registry: &Registry<'_>, digest: &str) -> Result<RegistryRows, EmitError> {
    let digest = literal(digest)?;

    let mut policies = Vec::new();
    for (name, policy) in &registry.retry_policies {
        let retry_on = policy
            .retry_on
            .iter()
            .map(keyword)
            .collect::<Result<Vec<_>, _>>()?;
        policies.push(vec![
            literal(name)?,
            literal(&keyword(&policy.kind)?)?,
            millis(&policy.base_delay)?,
            policy
                .max_delay
                .as_deref()
                .map_or_else(|| Ok("NULL".to_owned()), millis)?,
            policy.max_attempts.to_string(),
            literal(&keyword(&policy.jitter)?)?,
            text_array(&retry_on)?,
            digest.clone(),
        ]);
    }

    let mut types = Vec::new();
    let mut versions = Vec::new();
    for (name, event) in &registry.event_types {
        types.push(vec![
            literal(name)?,
            literal(event.description)?,
            literal(event.producer_class)?,
            text_array(event.order_key)?,
            literal(&keyword(&event.compat)?)?,
            literal(&keyword(&event.status)?)?,
            event.max_payload_bytes.to_string(),
            digest.clone(),
        ]);
        for version in &event.versions {
            let parsed = semver::Version::parse(&version.version)
                .map_err(|error| invalid(format!("{name} version {}: {error}", version.version)))?;
            versions.push(vec![
                literal(name)?,
                literal(&version.version)?,
                bigint(parsed.major)?,
                bigint(parsed.minor)?,
                bigint(parsed.patch)?,
                jsonb(version.schema)?,
                literal(&version.schema_digest)?,
                digest.clone(),
            ]);
        }
    }

    let mut classes = Vec::new();
    for (name, class) in &registry.executor_classes {
        classes.push(vec![
            literal(name)?,
            literal(class.description)?,
            class.mutating.to_string(),
            literal(class.idempotency_namespace)?,
            literal(class.heartbeat_owner)?,
            class
                .heartbeat_threshold
                .as_deref()
                .map_or_else(|| Ok("NULL".to_owned()), millis)?,
            class.active.to_string(),
            digest.clone(),
        ]);
    }

    let mut consumers = Vec::new();
    let mut consumer_classes = Vec::new();
    let mut subscriptions = Vec::new();
    for (name, consumer) in &registry.consumers {
        if let Some(class) = consumer.executor_class {
            consumer_classes.push(vec![literal(name)?, literal(class)?]);
        }
        consumers.push(vec![
            literal(name)?,
            literal(consumer.description)?,
            literal(&keyword(&consumer.executor_kind)?)?,
            literal(consumer.retry_policy)?,
            literal(&keyword(&consumer.handler)?)?,
            literal(&keyword(&consumer.ordering)?)?,
            literal(&keyword(&consumer.mode)?)?,
            millis(&consumer.heartbeat_threshold)?,
            digest.clone(),
        ]);
        for (event, requirement) in &consumer.subscribes {
            subscriptions.push(vec![
                literal(name)?,
                literal(event)?,
                literal(requirement)?,
                digest.clone(),
            ]);
        }
    }

    Ok(RegistryRows {
        retry_policies: policies,
        event_types: types,
        event_versions: versions,
        executor_classes: classes,
        consumers,
        consumer_classes,
        subscriptions,
    })
}

/// The settings row, in `evc_settings.sql`'s column order.
fn settings_row(set: &ContractSet, settings_digest: &str) -> Result<Row, EmitError> {
    let project = &set.project;
    let policy = &project.payload_policy;
    let dispatcher = &project.dispatcher;
    let mut timeouts = serde_json::Map::new();
    for (name, consumer) in &set.consumers {
        if let Some(timeout) = consumer.handler_timeout {
            let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            timeouts.insert(name.clone(), serde_json::Value::from(ms));
        }
    }
    Ok(vec![
        "true".to_owned(),
        literal(settings_digest)?,
        text_array(&policy.denied_keys)?,
        text_array(&policy.credential_key_names)?,
        policy.default_max_bytes.to_string(),
        policy.hard_max_bytes.to_string(),
        project.require_tenant_scope.to_string(),
        dispatcher.batch_size.to_string(),
        duration_ms(dispatcher.lease)?,
        duration_ms(dispatcher.heartbeat)?,
        dispatcher.max_attempts.to_string(),
        duration_ms(dispatcher.backoff_ceiling)?,
        jsonb(&serde_json::Value::Object(timeouts))?,
    ])
}

/// The schedules and lag thresholds as the runtime reads them back from `evc_settings`
/// (`deployed_registry`), and the settings digest that records them; empty when the project
/// has neither, so its settings file renders as before they existed.
fn scheduling_row(set: &ContractSet, settings_digest: &str) -> Result<Row, EmitError> {
    let thresholds: Vec<serde_json::Value> = set
        .consumers
        .values()
        .flat_map(|consumer| {
            consumer
                .lag_thresholds
                .iter()
                .map(|(producer_class, threshold)| {
                    serde_json::json!({
                        "consumer": consumer.name,
                        "producer_class": producer_class,
                        "threshold_ms": u64::try_from(threshold.as_millis()).unwrap_or(u64::MAX),
                    })
                })
        })
        .collect();
    if set.schedules.is_empty() && thresholds.is_empty() {
        return Ok(Vec::new());
    }
    let schedules: Vec<serde_json::Value> = set
        .schedules
        .values()
        .map(|schedule| {
            serde_json::json!({
                "name": schedule.name,
                "cron": schedule.cron,
                "event": schedule.event,
                "missed": crate::format::keyword(&schedule.missed),
                "catch_up_limit": schedule.catch_up_limit,
                "tenant_scope": schedule.tenant_scope,
            })
        })
        .collect();
    Ok(vec![
        jsonb(&serde_json::Value::Array(schedules))?,
        jsonb(&serde_json::Value::Array(thresholds))?,
        literal(settings_digest)?,
    ])
}

/// The cut-over gates as the runtime reads them back from `evc_settings`, and the settings
/// digest that records them; empty when no consumer declares one.
fn gates_row(set: &ContractSet, settings_digest: &str) -> Result<Row, EmitError> {
    let gates: Vec<serde_json::Value> = set
        .consumers
        .values()
        .filter_map(|consumer| {
            let gate = consumer.cutover_gate?;
            Some(serde_json::json!({
                "consumer": consumer.name,
                "min_reconciled": gate.min_reconciled,
                "min_span_ms": u64::try_from(gate.min_span.as_millis()).unwrap_or(u64::MAX),
                "max_unexplained": gate.max_unexplained,
            }))
        })
        .collect();
    if gates.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![
        jsonb(&serde_json::Value::Array(gates))?,
        literal(settings_digest)?,
    ])
}

/// The retention periods as the runtime reads them back from `evc_settings`, and the settings
/// digest that records them; empty when the contracts declare none.
fn retention_row(set: &ContractSet, settings_digest: &str) -> Result<Row, EmitError> {
    if !set.declares_retention() {
        return Ok(Vec::new());
    }
    let retention = &set.project.retention;
    let ms = |period: Option<std::time::Duration>| {
        period.map(|period| u64::try_from(period.as_millis()).unwrap_or(u64::MAX))
    };
    let events: Vec<serde_json::Value> = set
        .events
        .values()
        .filter_map(|event| {
            Some(serde_json::json!({"event_type": event.name, "ms": ms(event.retention)?}))
        })
        .collect();
    let periods = serde_json::json!({
        "events": events,
        "attempts_ms": ms(retention.attempts),
        "reconciliations_ms": ms(retention.reconciliations),
        "rejects_ms": ms(retention.rejects),
        "effects_ms": ms(retention.effects),
    });
    Ok(vec![jsonb(&periods)?, literal(settings_digest)?])
}

/// The inventory rules as the runtime reads them back from `evc_settings`, and the settings
/// digest that records them; empty when no consumer declares any.
fn inventory_row(set: &ContractSet, settings_digest: &str) -> Result<Row, EmitError> {
    let rules: Vec<serde_json::Value> = set
        .consumers
        .values()
        .filter(|consumer| consumer.inventory.is_declared())
        .map(|consumer| {
            serde_json::json!({
                "consumer": consumer.name,
                "max_age_ms": consumer
                    .inventory
                    .max_age
                    .map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX)),
                "repair": match consumer.inventory.repair {
                    crate::model::InventoryRepair::None => "none",
                    crate::model::InventoryRepair::Conform => "conform",
                },
            })
        })
        .collect();
    if rules.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![
        jsonb(&serde_json::Value::Array(rules))?,
        literal(settings_digest)?,
    ])
}

/// The evidence recording as the runtime reads it back from `evc_settings`, and the settings
/// digest that records it; empty when the contracts record none.
fn evidence_row(set: &ContractSet, settings_digest: &str) -> Result<Row, EmitError> {
    let Some(evidence) = set.project.evidence else {
        return Ok(Vec::new());
    };
    let ms = |period: std::time::Duration| u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
    let recording = serde_json::json!({
        "every_ms": ms(evidence.every),
        "keep_ms": ms(evidence.keep),
        "window_ms": ms(evidence.window),
        "correlation_ms": ms(evidence.correlation),
        "min_count": evidence.min_count,
    });
    Ok(vec![jsonb(&recording)?, literal(settings_digest)?])
}

/// A duration as a `bigint` of milliseconds.
fn duration_ms(duration: std::time::Duration) -> Result<String, EmitError> {
    bigint(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// A SQL string literal holding `text` exactly, whatever `standard_conforming_strings` says:
/// `'...'` with quotes doubled, or `E'...'` with backslashes doubled too when `text` has any.
fn literal(text: &str) -> Result<String, EmitError> {
    if text.contains('\0') {
        return Err(invalid(format!(
            "{text:?} contains a NUL character, which PostgreSQL text cannot hold"
        )));
    }
    let quoted = text.replace('\'', "''");
    Ok(if text.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    })
}

/// A `text[]` literal.
fn text_array(items: &[String]) -> Result<String, EmitError> {
    let items = items
        .iter()
        .map(|item| literal(item))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("ARRAY[{}]::text[]", items.join(", ")))
}

/// A `jsonb` literal of `value`'s canonical JSON (the text its digest is computed over).
fn jsonb(value: &serde_json::Value) -> Result<String, EmitError> {
    if has_nul(value) {
        return Err(invalid(
            "a schema contains a NUL character, which jsonb cannot hold".to_owned(),
        ));
    }
    Ok(format!(
        "{}::jsonb",
        literal(&digest::canonical_json(value))?
    ))
}

/// Whether any key or string in `value` contains NUL.
fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(text) => text.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map
            .iter()
            .any(|(key, value)| key.contains('\0') || has_nul(value)),
        _ => false,
    }
}

/// A `bigint` literal.
fn bigint(number: u64) -> Result<String, EmitError> {
    i64::try_from(number)
        .map(|number| number.to_string())
        .map_err(|_| invalid(format!("{number} does not fit a bigint")))
}

/// A contract duration (`30s`) as a `bigint` of milliseconds.
fn millis(text: &str) -> Result<String, EmitError> {
    let duration =
        duration::parse(text).ok_or_else(|| invalid(format!("{text:?} is not a duration")))?;
    bigint(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// The snake_case keyword a format enum is written as in contracts and in registry.json.
fn keyword<T: Serialize>(value: &T) -> Result<String, EmitError> {
    let text = crate::format::keyword(value);
    if text.is_empty() {
        return Err(invalid("a registry value is not a keyword".to_owned()));
    }
    Ok(text)
}

/// A registry value that cannot be written as SQL.
fn invalid(message: String) -> EmitError {
    EmitError::Serialize {
        document: REGISTRY_DOCUMENT,
        message,
    }
}

/// `text` ending in exactly one newline.
fn with_final_newline(text: String) -> String {
    let mut text = text.trim_end_matches('\n').to_owned();
    text.push('\n');
    text
}

#[cfg(test)]
mod revert_tests {
    use super::*;

    #[test]
    fn reverting_to_an_older_registry_adds_a_new_migration() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let existing = vec![
            "0001_evc_runtime.sql".to_owned(),
            format!("0002_evc_registry_{}.sql", &a[..12]),
            format!("0003_evc_registry_{}.sql", &b[..12]),
        ];
        assert_eq!(registry_file_name(&b, &existing), existing[2]);
        assert_eq!(
            registry_file_name(&a, &existing),
            format!("0004_evc_registry_{}.sql", &a[..12])
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn first_registry_migration_follows_the_runtime_tables() {
        assert_eq!(
            registry_file_name(DIGEST, &[]),
            "0002_evc_registry_0123456789ab.sql"
        );
        assert_eq!(
            registry_file_name(DIGEST, &names(&[RUNTIME_MIGRATION])),
            "0002_evc_registry_0123456789ab.sql"
        );
    }

    #[test]
    fn the_newest_registry_file_for_the_same_digest_is_named_again() {
        let existing = names(&[
            "0001_evc_registry_ffffffffffff.sql",
            RUNTIME_MIGRATION,
            "0002_evc_registry_0123456789ab.sql",
            "0004_app_tables.sql",
        ]);
        assert_eq!(
            registry_file_name(DIGEST, &existing),
            "0002_evc_registry_0123456789ab.sql"
        );
    }

    #[test]
    fn a_new_digest_numbers_after_the_highest_present_file() {
        let existing = names(&[
            "0004_app_tables.sql",
            RUNTIME_MIGRATION,
            "0002_evc_registry_ffffffffffff.sql",
            "README.md",
            "x_not_a_migration.sql",
        ]);
        assert_eq!(
            registry_file_name(DIGEST, &existing),
            "0005_evc_registry_0123456789ab.sql"
        );
        // Timestamp versions (sqlx-cli's default) are numbers too.
        let existing = names(&["20240101120000_app.sql"]);
        assert_eq!(
            registry_file_name(DIGEST, &existing),
            "20240101120001_evc_registry_0123456789ab.sql"
        );
        // A digest-looking name without a version is not a migration.
        let existing = names(&["draft_evc_registry_0123456789ab.sql"]);
        assert_eq!(
            registry_file_name(DIGEST, &existing),
            "0002_evc_registry_0123456789ab.sql"
        );
    }

    #[test]
    fn literals_double_quotes_and_escape_backslashes() {
        assert_eq!(literal("plain").ok(), Some("'plain'".to_owned()));
        assert_eq!(literal("it's").ok(), Some("'it''s'".to_owned()));
        assert_eq!(literal("''").ok(), Some("''''''".to_owned()));
        assert_eq!(
            literal(r"a\'b").ok(),
            Some(r"E'a\\''b'".to_owned()),
            "with a backslash, an E'' literal keeps it whatever standard_conforming_strings is"
        );
        assert_eq!(literal("two\nlines").ok(), Some("'two\nlines'".to_owned()));
        assert!(literal("nul\0").is_err());
        assert!(jsonb(&serde_json::json!({"a": ["x\u{0}"]})).is_err());
        assert_eq!(
            jsonb(&serde_json::json!({"pattern": "^[a-z]\\d'"})).ok(),
            Some(r#"E'{"pattern":"^[a-z]\\\\d''"}'::jsonb"#.to_owned())
        );
        assert_eq!(
            text_array(&names(&["a", "b'c"])).ok(),
            Some("ARRAY['a', 'b''c']::text[]".to_owned())
        );
        assert_eq!(text_array(&[]).ok(), Some("ARRAY[]::text[]".to_owned()));
    }

    #[test]
    fn reference_contracts_render_stably() -> Result<(), Box<dyn std::error::Error>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
        let set = crate::ContractSet::load(dir)?.contracts;
        let digest = manifest::registry_digest(&set)?;
        let first = render(&set, &Layout::default())?;
        let names: Vec<String> = first
            .iter()
            .filter_map(|artifact| artifact.path.file_name()?.to_str().map(str::to_owned))
            .collect();
        assert_eq!(
            names,
            [
                RUNTIME_MIGRATION.to_owned(),
                format!("0002{RUNTIME_V2_SUFFIX}"),
                format!("0003{RUNTIME_V3_SUFFIX}"),
                format!("0004{RUNTIME_V4_SUFFIX}"),
                format!("0005{RUNTIME_V5_SUFFIX}"),
                format!("0006{RUNTIME_V6_SUFFIX}"),
                format!("0007{RUNTIME_V7_SUFFIX}"),
                format!("0008{RUNTIME_V8_SUFFIX}"),
                format!("0009{RUNTIME_V9_SUFFIX}"),
                format!("0010{RUNTIME_V10_SUFFIX}"),
                format!("0011{RUNTIME_V11_SUFFIX}"),
                format!("0012{RUNTIME_V12_SUFFIX}"),
                format!("0013{RUNTIME_V13_SUFFIX}"),
                format!("0014{RUNTIME_V14_SUFFIX}"),
                format!("0015{RUNTIME_V15_SUFFIX}"),
                format!("0016{RUNTIME_V16_SUFFIX}"),
                format!("0017{RUNTIME_V17_SUFFIX}"),
                format!("0018{RUNTIME_V18_SUFFIX}"),
                format!("0019{RUNTIME_V19_SUFFIX}"),
                format!("0020{RUNTIME_V20_SUFFIX}"),
                format!("0021{RUNTIME_V21_SUFFIX}"),
                format!("0022{RUNTIME_V22_SUFFIX}"),
                format!("0023{RUNTIME_V23_SUFFIX}"),
                format!("0024{RUNTIME_V24_SUFFIX}"),
                format!("0025{RUNTIME_V25_SUFFIX}"),
                format!("0026{RUNTIME_V26_SUFFIX}"),
                format!("0027{RUNTIME_V27_SUFFIX}"),
                format!("0028{RUNTIME_V28_SUFFIX}"),
                format!("0029{RUNTIME_V29_SUFFIX}"),
                format!("0030{RUNTIME_V30_SUFFIX}"),
                format!("0031{RUNTIME_V31_SUFFIX}"),
                format!("0032{RUNTIME_V32_SUFFIX}"),
                format!("0033_evc_registry_{}.sql", &digest[..DIGEST_PREFIX_LEN]),
                format!(
                    "0034_evc_settings_{}.sql",
                    &settings_digest(&set)?[..DIGEST_PREFIX_LEN]
                ),
            ]
        );
        for artifact in &first {
            assert!(artifact.path.starts_with("generated/migrations"));
            assert!(
                artifact
                    .contents
                    .starts_with(&format!("-- {MIGRATION_NOTICE}\n"))
            );
            assert!(artifact.contents.ends_with(";\n"));
        }
        let layout = Layout {
            existing_migrations: names,
            ..Layout::default()
        };
        assert_eq!(render(&set, &layout)?, first);
        Ok(())
    }

    #[test]
    fn a_runtime_step_keeps_its_name_or_numbers_after_the_highest_file() {
        assert_eq!(
            step_file_name(RUNTIME_V2_SUFFIX, &[]),
            "0002_evc_runtime_v2.sql"
        );
        let existing = names(&[
            RUNTIME_MIGRATION,
            "0002_evc_registry_0123456789ab.sql",
            "0007_app_tables.sql",
        ]);
        assert_eq!(
            step_file_name(RUNTIME_V2_SUFFIX, &existing),
            "0008_evc_runtime_v2.sql"
        );
        let existing = names(&[
            RUNTIME_MIGRATION,
            "0002_evc_registry_0123456789ab.sql",
            "0003_evc_runtime_v2.sql",
            "0004_evc_registry_ffffffffffff.sql",
        ]);
        assert_eq!(
            step_file_name(RUNTIME_V2_SUFFIX, &existing),
            "0003_evc_runtime_v2.sql"
        );
    }

    #[test]
    fn the_fifth_and_thirtieth_steps_cap_payloads_at_the_project_s_hard_cap()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
        let mut set = crate::ContractSet::load(dir)?.contracts;
        let step = |set: &ContractSet, suffix: &str| -> Result<String, EmitError> {
            let artifacts = render(set, &Layout::default())?;
            Ok(artifacts
                .into_iter()
                .find(|artifact| artifact.path.to_string_lossy().ends_with(suffix))
                .map(|artifact| artifact.contents)
                .unwrap_or_default())
        };
        // Every comparison of the measured payload with the cap: the fifth step's function,
        // and the thirtieth step's function and trigger condition.
        let caps = |sql: &str| -> Vec<String> {
            sql.split("octet_length(replace(replace(NEW.payload::text, ', ', ','), ': ', ':'))")
                .skip(1)
                .filter_map(|rest| rest.split_whitespace().nth(1))
                .map(|cap| cap.trim_end_matches(')').to_owned())
                .collect()
        };
        let hard = set.project.payload_policy.hard_max_bytes.to_string();
        assert_eq!(caps(&step(&set, RUNTIME_V5_SUFFIX)?), [hard.as_str()]);
        assert_eq!(
            caps(&step(&set, RUNTIME_V30_SUFFIX)?),
            [hard.as_str(), hard.as_str()]
        );
        set.project.payload_policy.hard_max_bytes = 1_048_576;
        assert_eq!(caps(&step(&set, RUNTIME_V5_SUFFIX)?), ["1048576"]);
        assert_eq!(
            caps(&step(&set, RUNTIME_V30_SUFFIX)?),
            ["1048576", "1048576"]
        );
        Ok(())
    }

    #[test]
    fn a_settings_change_is_a_new_settings_file_and_leaves_the_registry_file()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
        let mut set = crate::ContractSet::load(dir)?.contracts;
        let first = render(&set, &Layout::default())?;
        let layout = Layout {
            existing_migrations: first
                .iter()
                .filter_map(|a| a.path.file_name()?.to_str().map(str::to_owned))
                .collect(),
            ..Layout::default()
        };
        let settings_of = |artifacts: &[Artifact]| {
            artifacts
                .iter()
                .find(|a| a.path.to_string_lossy().contains(SETTINGS_INFIX))
                .cloned()
        };
        let registry_of = |artifacts: &[Artifact]| {
            artifacts
                .iter()
                .find(|a| a.path.to_string_lossy().contains(REGISTRY_INFIX))
                .cloned()
        };
        let before = settings_of(&first).ok_or("no settings file")?;
        assert!(
            before
                .contents
                .contains("-- The settings the runtime applies")
        );
        assert!(before.contents.contains("ARRAY['body_text', "));

        set.project.dispatcher.batch_size = 7;
        set.project.dispatcher.lease = std::time::Duration::from_secs(3);
        let changed = render(&set, &layout)?;
        let after = settings_of(&changed).ok_or("no settings file")?;
        assert_eq!(
            after.path.file_name().and_then(|n| n.to_str()),
            Some(format!("0035_evc_settings_{}.sql", &settings_digest(&set)?[..12]).as_str()),
            "the next number after the checked-in files"
        );
        // batch_size, lease_ms in column order.
        assert!(
            after
                .contents
                .contains(", false, 7, 3000, 10000, 12, 900000, '{}'::jsonb)")
        );
        assert_eq!(registry_of(&changed), registry_of(&first));
        Ok(())
    }

    #[test]
    fn durations_are_milliseconds() {
        assert_eq!(millis("30s").ok(), Some("30000".to_owned()));
        assert_eq!(millis("250ms").ok(), Some("250".to_owned()));
        assert!(millis("soon").is_err());
    }
}
