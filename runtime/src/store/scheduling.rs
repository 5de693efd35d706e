//! The registry's schedules, lag thresholds and cut-over gates as JSON, as a database holds
//! them for readers without a build of the application: PostgreSQL's settings row
//! (`evc_settings.schedules`, `lag_thresholds` and `cutover_gates`, written by the settings
//! migrations) and a SQLite file's recorded registry document. Read back, their strings are
//! leaked like the rest of a deployed registry's: they live as long as the process.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::registry::{
    CutoverGateDescriptor, LagThresholdDescriptor, MissedSlots, ScheduleDescriptor,
};
use crate::store::rows::{leak, leak_slice};

/// One schedule.
#[derive(Debug, Serialize, Deserialize)]
struct Schedule {
    name: String,
    cron: String,
    event: String,
    /// `skip` or `catch_up`.
    missed: String,
    catch_up_limit: u32,
    #[serde(default)]
    tenant_scope: Option<String>,
}

/// One lag threshold.
#[derive(Debug, Serialize, Deserialize)]
struct Threshold {
    consumer: String,
    producer_class: String,
    threshold_ms: u64,
}

/// One cut-over gate.
#[derive(Debug, Serialize, Deserialize)]
struct Gate {
    consumer: String,
    min_reconciled: u32,
    min_span_ms: u64,
    max_unexplained: u32,
}

/// `gates` as a JSON list.
pub(in crate::store) fn gates_value(gates: &[CutoverGateDescriptor]) -> Value {
    let rows: Vec<Gate> = gates
        .iter()
        .map(|g| Gate {
            consumer: g.consumer.to_owned(),
            min_reconciled: g.min_reconciled,
            min_span_ms: g.min_span_ms,
            max_unexplained: g.max_unexplained,
        })
        .collect();
    serde_json::to_value(rows).unwrap_or(Value::Null)
}

/// The cut-over gates of a JSON list, sorted by consumer as the registry keeps them.
///
/// # Errors
/// What is wrong with the list (never its content).
pub(in crate::store) fn gates_of(value: Value) -> Result<&'static [CutoverGateDescriptor], String> {
    let rows: Vec<Gate> =
        serde_json::from_value(value).map_err(|_| "the cut-over gates are not a list of gates")?;
    let mut gates: Vec<CutoverGateDescriptor> = rows
        .into_iter()
        .map(|row| CutoverGateDescriptor {
            consumer: leak(row.consumer),
            min_reconciled: row.min_reconciled,
            min_span_ms: row.min_span_ms,
            max_unexplained: row.max_unexplained,
        })
        .collect();
    gates.sort_by_key(|g| g.consumer);
    Ok(leak_slice(gates))
}

/// `schedules` as a JSON list.
pub(in crate::store) fn schedules_value(schedules: &[ScheduleDescriptor]) -> Value {
    let rows: Vec<Schedule> = schedules
        .iter()
        .map(|s| Schedule {
            name: s.name.to_owned(),
            cron: s.cron.to_owned(),
            event: s.event.to_owned(),
            missed: match s.missed {
                MissedSlots::Skip => "skip",
                MissedSlots::CatchUp => "catch_up",
            }
            .to_owned(),
            catch_up_limit: s.catch_up_limit,
            tenant_scope: s.tenant_scope.map(str::to_owned),
        })
        .collect();
    serde_json::to_value(rows).unwrap_or(Value::Null)
}

/// `thresholds` as a JSON list.
pub(in crate::store) fn thresholds_value(thresholds: &[LagThresholdDescriptor]) -> Value {
    let rows: Vec<Threshold> = thresholds
        .iter()
        .map(|t| Threshold {
            consumer: t.consumer.to_owned(),
            producer_class: t.producer_class.to_owned(),
            threshold_ms: t.threshold_ms,
        })
        .collect();
    serde_json::to_value(rows).unwrap_or(Value::Null)
}

/// The schedules of a JSON list, sorted by name as the registry keeps them.
///
/// # Errors
/// What is wrong with the list (never its content).
pub(in crate::store) fn schedules_of(
    value: Value,
) -> Result<&'static [ScheduleDescriptor], String> {
    let rows: Vec<Schedule> =
        serde_json::from_value(value).map_err(|_| "the schedules are not a list of schedules")?;
    let mut schedules = Vec::with_capacity(rows.len());
    for row in rows {
        let missed = match row.missed.as_str() {
            "skip" => MissedSlots::Skip,
            "catch_up" => MissedSlots::CatchUp,
            _ => return Err("a schedule's `missed` is neither `skip` nor `catch_up`".to_owned()),
        };
        schedules.push(ScheduleDescriptor {
            name: leak(row.name),
            cron: leak(row.cron),
            event: leak(row.event),
            missed,
            catch_up_limit: row.catch_up_limit,
            tenant_scope: row.tenant_scope.map(leak),
        });
    }
    schedules.sort_by_key(|s| s.name);
    Ok(leak_slice(schedules))
}

/// The lag thresholds of a JSON list, sorted by consumer, then producer class.
///
/// # Errors
/// What is wrong with the list (never its content).
pub(in crate::store) fn thresholds_of(
    value: Value,
) -> Result<&'static [LagThresholdDescriptor], String> {
    let rows: Vec<Threshold> = serde_json::from_value(value)
        .map_err(|_| "the lag thresholds are not a list of thresholds")?;
    let mut thresholds: Vec<LagThresholdDescriptor> = rows
        .into_iter()
        .map(|row| LagThresholdDescriptor {
            consumer: leak(row.consumer),
            producer_class: leak(row.producer_class),
            threshold_ms: row.threshold_ms,
        })
        .collect();
    thresholds.sort_by_key(|t| (t.consumer, t.producer_class));
    Ok(leak_slice(thresholds))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEDULES: &[ScheduleDescriptor] = &[
        ScheduleDescriptor {
            name: "a",
            cron: "0 3 * * *",
            event: "cron.tick.a",
            missed: MissedSlots::CatchUp,
            catch_up_limit: 7,
            tenant_scope: Some("acme"),
        },
        ScheduleDescriptor {
            name: "b",
            cron: "*/15 * * * *",
            event: "cron.tick.b",
            missed: MissedSlots::Skip,
            catch_up_limit: 100,
            tenant_scope: None,
        },
    ];

    const GATES: &[CutoverGateDescriptor] = &[
        CutoverGateDescriptor {
            consumer: "a",
            min_reconciled: 30,
            min_span_ms: 259_200_000,
            max_unexplained: 0,
        },
        CutoverGateDescriptor {
            consumer: "b",
            min_reconciled: 1,
            min_span_ms: 0,
            max_unexplained: 2,
        },
    ];

    const THRESHOLDS: &[LagThresholdDescriptor] = &[LagThresholdDescriptor {
        consumer: "audit",
        producer_class: "dot",
        threshold_ms: 300_000,
    }];

    #[test]
    fn schedules_and_thresholds_read_back_equal() {
        assert_eq!(schedules_of(schedules_value(SCHEDULES)), Ok(SCHEDULES));
        assert_eq!(thresholds_of(thresholds_value(THRESHOLDS)), Ok(THRESHOLDS));
        assert_eq!(gates_of(gates_value(GATES)), Ok(GATES));
    }

    #[test]
    fn a_list_in_another_shape_is_refused() {
        assert!(schedules_of(serde_json::json!([{"name": "a"}])).is_err());
        assert!(schedules_of(serde_json::json!({"a": 1})).is_err());
        let mut value = schedules_value(SCHEDULES);
        value[0]["missed"] = "later".into();
        assert!(schedules_of(value).is_err());
        assert!(thresholds_of(serde_json::json!([{"consumer": 1}])).is_err());
    }
}
