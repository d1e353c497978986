//! What changed in the registry, as other nodes hear it: a [`Change`], and its form as
//! a PostgreSQL notification payload, `<kind>:<tenant>/<name>` on channel
//! `sluice_registry` (see `watch` for how it is delivered).

/// The PostgreSQL notification channel.
pub(crate) const CHANNEL: &str = "sluice_registry";

/// Something another node (or this one) changed: reload it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A tenant was created, changed or deleted (a deletion also removed its functions
    /// and keys).
    Tenant {
        /// The tenant's id.
        tenant: String,
    },
    /// An API key was issued, provided or revoked.
    Key {
        /// The key's tenant (`None`: the admin key).
        tenant: Option<String>,
        /// The key's id.
        key_id: String,
    },
    /// A function was deployed, changed (artifacts, publish, pin) or deleted.
    Function {
        /// Its tenant.
        tenant: String,
        /// Its name.
        name: String,
    },
    /// The watcher reconnected after losing its connection: changes may have been
    /// missed, so reload everything.
    Resync,
}

impl Change {
    /// The notification's payload, `<kind>:<tenant>/<name>`.
    pub(crate) fn payload(&self) -> String {
        match self {
            Change::Tenant { tenant } => format!("tenant:{tenant}/"),
            Change::Key { tenant, key_id } => format!("key:{}/{key_id}", tenant.as_deref().unwrap_or("admin")),
            Change::Function { tenant, name } => format!("function:{tenant}/{name}"),
            Change::Resync => "resync:/".to_owned(),
        }
    }

    /// Reads a payload; `None` for one this build does not know.
    pub(crate) fn parse(payload: &str) -> Option<Change> {
        let (kind, rest) = payload.split_once(':')?;
        let (tenant, name) = rest.split_once('/')?;
        Some(match kind {
            "tenant" => Change::Tenant { tenant: tenant.to_owned() },
            "key" => Change::Key { tenant: (tenant != "admin").then(|| tenant.to_owned()), key_id: name.to_owned() },
            "function" => Change::Function { tenant: tenant.to_owned(), name: name.to_owned() },
            "resync" => Change::Resync,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip() {
        for change in [
            Change::Tenant { tenant: "acme".into() },
            Change::Key { tenant: Some("acme".into()), key_id: "key_0123".into() },
            Change::Key { tenant: None, key_id: "admin".into() },
            Change::Function { tenant: "acme".into(), name: "m-1_v2.onnx".into() },
            Change::Resync,
        ] {
            assert_eq!(Change::parse(&change.payload()), Some(change));
        }
        assert_eq!(Change::parse("function:acme/f").unwrap().payload(), "function:acme/f");
        assert_eq!(Change::parse("bogus"), None);
        assert_eq!(Change::parse("later:a/b"), None);
    }
}
