//! The static registry: every event type and version the contracts define, as `'static` data.

/// One version of an event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionDescriptor {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Patch version.
    pub patch: u64,
    /// The payload's JSON Schema, as JSON text.
    pub schema: &'static str,
}

/// One event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventDescriptor {
    /// Event type name (`iu.born`).
    pub name: &'static str,
    /// Versions, ascending.
    pub versions: &'static [VersionDescriptor],
}

/// Every registered event type, sorted by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registry {
    /// Event types, sorted by name.
    pub events: &'static [EventDescriptor],
}

impl Registry {
    /// The event type called `name`, if registered.
    pub fn event(&self, name: &str) -> Option<&'static EventDescriptor> {
        self.events
            .binary_search_by(|event| event.name.cmp(name))
            .ok()
            .map(|index| &self.events[index])
    }

    /// The exact version of an event type, if registered.
    pub fn version(
        &self,
        name: &str,
        (major, minor, patch): (u64, u64, u64),
    ) -> Option<&'static VersionDescriptor> {
        self.event(name)?
            .versions
            .iter()
            .find(|v| (v.major, v.minor, v.patch) == (major, minor, patch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BORN: &[VersionDescriptor] = &[
        VersionDescriptor {
            major: 1,
            minor: 0,
            patch: 0,
            schema: "{}",
        },
        VersionDescriptor {
            major: 1,
            minor: 1,
            patch: 0,
            schema: "{}",
        },
    ];
    const REGISTRY: Registry = Registry {
        events: &[
            EventDescriptor {
                name: "iu.born",
                versions: BORN,
            },
            EventDescriptor {
                name: "step.ready",
                versions: &[],
            },
        ],
    };

    #[test]
    fn finds_registered_types_and_versions_only() {
        assert_eq!(REGISTRY.event("iu.born").map(|e| e.name), Some("iu.born"));
        assert!(REGISTRY.event("iu.bron").is_none());
        assert!(REGISTRY.version("iu.born", (1, 1, 0)).is_some());
        assert!(REGISTRY.version("iu.born", (2, 0, 0)).is_none());
        assert!(REGISTRY.version("step.ready", (1, 0, 0)).is_none());
    }
}
