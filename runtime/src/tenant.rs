//! Which tenant's rows a session works on (docs/runtime.md, "Tenants"). On PostgreSQL the
//! scope is the session setting `evc.tenant`, set when a connection opens
//! ([`TenantScope::connect_options`]); the row-level security policies of the eleventh runtime
//! step filter every tenant table on it while the contracts require a tenant scope.

/// The value of `evc.tenant` that names every tenant. No event may carry it as its tenant
/// scope ([`crate::Rejection::ReservedTenantScope`]).
pub const ALL_TENANTS: &str = "*";

/// The longest tenant name a scope takes, in characters.
const MAX_TENANT_CHARS: usize = 200;

/// The rows a session sees and writes: every tenant's, or one tenant's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantScope {
    /// The tenant; `None` for every tenant.
    tenant: Option<String>,
}

/// A tenant name [`TenantScope::only`] refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TenantScopeError {
    /// The name is empty or only whitespace.
    #[error("a tenant name cannot be empty")]
    Empty,
    /// The name is `*`, which names every tenant.
    #[error("`*` names every tenant, not one (use the scope of all tenants)")]
    AllTenants,
    /// The name is longer than 200 characters.
    #[error("a tenant name has at most {MAX_TENANT_CHARS} characters, this one has {chars}")]
    TooLong {
        /// The name's length in characters.
        chars: usize,
    },
    /// The name holds a control character.
    #[error("a tenant name cannot hold control characters")]
    ControlCharacter,
}

impl TenantScope {
    /// Every tenant's rows (`evc.tenant = '*'`): dispatchers and operators that serve all
    /// tenants.
    pub fn all() -> Self {
        Self { tenant: None }
    }

    /// The rows of `tenant` only: the events whose tenant scope is `tenant`, their deliveries
    /// and audit, and the operations a session of this scope recorded.
    ///
    /// # Errors
    /// [`TenantScopeError`] when `tenant` is empty, `*`, longer than 200 characters or holds a
    /// control character.
    pub fn only(tenant: impl Into<String>) -> Result<Self, TenantScopeError> {
        let tenant = tenant.into();
        if tenant.trim().is_empty() {
            return Err(TenantScopeError::Empty);
        }
        if tenant == ALL_TENANTS {
            return Err(TenantScopeError::AllTenants);
        }
        let chars = tenant.chars().count();
        if chars > MAX_TENANT_CHARS {
            return Err(TenantScopeError::TooLong { chars });
        }
        if tenant.chars().any(char::is_control) {
            return Err(TenantScopeError::ControlCharacter);
        }
        Ok(Self {
            tenant: Some(tenant),
        })
    }

    /// The tenant, or `None` for every tenant.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// The value of the session setting `evc.tenant` for this scope.
    pub fn setting(&self) -> &str {
        self.tenant.as_deref().unwrap_or(ALL_TENANTS)
    }
}

impl std::fmt::Display for TenantScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tenant {
            Some(tenant) => write!(f, "tenant {tenant}"),
            None => f.write_str("every tenant"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_names_one_real_tenant_or_all() {
        assert_eq!(TenantScope::all().setting(), "*");
        assert_eq!(TenantScope::all().tenant(), None);
        let acme = TenantScope::only("acme eu").expect("a tenant");
        assert_eq!(acme.setting(), "acme eu");
        assert_eq!(acme.tenant(), Some("acme eu"));
        assert_eq!(TenantScope::only(" "), Err(TenantScopeError::Empty));
        assert_eq!(TenantScope::only("*"), Err(TenantScopeError::AllTenants));
        assert_eq!(
            TenantScope::only("a\nb"),
            Err(TenantScopeError::ControlCharacter)
        );
        assert_eq!(
            TenantScope::only("x".repeat(201)),
            Err(TenantScopeError::TooLong { chars: 201 })
        );
        assert!(TenantScope::only("x".repeat(200)).is_ok());
    }
}
