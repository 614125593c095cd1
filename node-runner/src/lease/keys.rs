//! The Node's lease key pair, kept in its data dir.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crypto_box::aead::OsRng;
use crypto_box::{PublicKey, SecretKey};
use zeroize::Zeroizing;

/// File name of the key in the data dir: 32 raw bytes, mode 0600.
pub const LEASE_KEY_FILE: &str = "lease.key";

/// The Node's X25519 key pair for sealed leases.
#[derive(Clone)]
pub struct NodeLeaseKey {
    secret: SecretKey,
}

impl fmt::Debug for NodeLeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeLeaseKey")
            .field("public", &self.public_bytes())
            .finish_non_exhaustive()
    }
}

impl NodeLeaseKey {
    /// Loads `data_dir/lease.key`, or creates it (mode 0600) on first start.
    ///
    /// # Errors
    /// The file cannot be read or written, is not 32 bytes, or is readable
    /// by group or others.
    pub fn load_or_create(data_dir: &Path) -> std::io::Result<Self> {
        let path = data_dir.join(LEASE_KEY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let bytes = Zeroizing::new(bytes);
                let mode = std::fs::metadata(&path)?.permissions().mode();
                if mode & 0o077 != 0 {
                    return Err(std::io::Error::other(format!(
                        "{}: mode {:o} lets others read the lease key; chmod 600 it",
                        path.display(),
                        mode & 0o777
                    )));
                }
                let key = <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: a lease key is 32 raw bytes", path.display()),
                    )
                })?;
                Ok(Self::from_bytes(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = Self {
                    secret: SecretKey::generate(&mut OsRng),
                };
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                file.write_all(&Zeroizing::new(key.secret.to_bytes())[..])?;
                file.sync_all()?;
                Ok(key)
            }
            Err(e) => Err(e),
        }
    }

    /// A key from its 32 secret bytes (tests).
    pub fn from_bytes(secret: [u8; 32]) -> Self {
        Self {
            secret: SecretKey::from_bytes(secret),
        }
    }

    /// The public key, as sent in `RegisterRequest.lease_public_key`.
    pub fn public_bytes(&self) -> [u8; 32] {
        *PublicKey::from(&self.secret).as_bytes()
    }

    /// Opens a sealed box to this key.
    pub(crate) fn unseal(&self, sealed: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
        self.secret.unseal(sealed).ok().map(Zeroizing::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_created_once_with_mode_0600_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let first = NodeLeaseKey::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(LEASE_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = NodeLeaseKey::load_or_create(dir.path()).unwrap();
        assert_eq!(first.public_bytes(), again.public_bytes());
    }

    #[test]
    fn a_key_readable_by_others_or_malformed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEASE_KEY_FILE);
        std::fs::write(&path, [1u8; 32]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(NodeLeaseKey::load_or_create(dir.path()).is_err());
        std::fs::write(&path, [1u8; 5]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(NodeLeaseKey::load_or_create(dir.path()).is_err());
    }
}
