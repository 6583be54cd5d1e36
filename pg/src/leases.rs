//! Tree leases on PostgreSQL ([`subagent_store::lease`]): taking,
//! renewing, releasing and listing them. Expiry is on the server's clock
//! (`clock_timestamp()`), the one clock every host shares.
//!
//! The fencing check itself is in the writer: an append's transaction
//! share-locks the leases it presents fences for, after the counter lock,
//! and refuses a stale token. Taking a lease over updates its row, so it
//! waits for any append that has already passed its check to commit; an
//! append that checks after the takeover sees the new token.

use std::time::Duration;

use subagent_core::SessionId;
use subagent_store::lease::{check_lease_request, term_millis};
use subagent_store::{Lease, LeaseRecord, StoreError, TreeLeases};

use crate::error::{db_error, unsigned};
use crate::log::Inner;
use crate::PgLog;

impl TreeLeases for PgLog {
    fn acquire_lease(
        &self,
        root: SessionId,
        holder: &str,
        term: Duration,
    ) -> Result<Lease, StoreError> {
        PgLog::acquire_lease(self, root, holder, term)
    }

    fn renew_lease(&self, lease: &Lease) -> Result<Lease, StoreError> {
        PgLog::renew_lease(self, lease)
    }

    fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        PgLog::release_lease(self, lease)
    }

    fn list_leases(&self) -> Result<Vec<LeaseRecord>, StoreError> {
        self.leases()
    }

    fn committed_head(&self) -> Result<u64, StoreError> {
        self.run(|inner| async move {
            let head = crate::head::poll_head(&inner).await?;
            crate::head::advance(&inner.head, head);
            Ok(head)
        })
    }
}

impl PgLog {
    /// Takes the lease of `root`'s tree for `holder` for `term`: a free
    /// one (token 1), a lapsed one, or `holder`'s own (so a host restarted
    /// under the same name fences out its earlier incarnation). Every take
    /// bumps the token.
    ///
    /// # Errors
    /// [`StoreError::LeaseHeld`] while another holder's lease has not
    /// lapsed; [`StoreError::InvalidLease`] for a bad holder or term
    /// (nothing is written); a database failure.
    pub fn acquire_lease(
        &self,
        root: SessionId,
        holder: &str,
        term: Duration,
    ) -> Result<Lease, StoreError> {
        check_lease_request(holder, term)?;
        let holder = holder.to_owned();
        self.run(move |inner| async move {
            let client = inner.client("taking a lease").await?;
            let fail = |err: tokio_postgres::Error| db_error("taking a lease", &err);
            // A lease that lapses between the refused take and the read of
            // its holder is taken on the second try.
            let mut retried = false;
            loop {
                let taken = client
                    .query_opt(
                        inner.sql.take_lease.as_str(),
                        &[root.as_uuid(), &holder, &term_millis(term)],
                    )
                    .await
                    .map_err(fail)?;
                if let Some(row) = taken {
                    return Ok(Lease {
                        root,
                        token: token_of(&inner, row.try_get(0).map_err(fail)?)?,
                        holder,
                        term,
                    });
                }
                match current(&inner, &client, root).await? {
                    Some(held) if held.remaining.is_zero() && !retried => retried = true,
                    Some(held) => {
                        return Err(StoreError::LeaseHeld {
                            root,
                            holder: held.holder,
                            remaining: held.remaining,
                        })
                    }
                    // Leases are never deleted: a vanished row is damage.
                    None => {
                        return Err(StoreError::Damaged {
                            path: inner.place(),
                            reason: format!("the lease of {root} vanished while it was taken"),
                        })
                    }
                }
            }
        })
    }

    /// Extends `lease` by its term from now, if its token is still the
    /// tree's. (A lease that lapsed but that nobody took is renewed: no
    /// other holder can have appended for the tree.)
    ///
    /// # Errors
    /// [`StoreError::Fenced`] when another holder took the tree;
    /// [`StoreError::InvalidLease`] for a holder or term no lease may
    /// have; a database failure.
    pub fn renew_lease(&self, lease: &Lease) -> Result<Lease, StoreError> {
        check_lease_request(&lease.holder, lease.term)?;
        let lease = lease.clone();
        self.run(move |inner| async move {
            let client = inner.client("renewing a lease").await?;
            let fail = |err: tokio_postgres::Error| db_error("renewing a lease", &err);
            let Some(token) = stored_token(lease.token) else {
                return Err(fenced(&inner, &client, &lease).await);
            };
            let renewed = client
                .query_opt(
                    inner.sql.renew_lease.as_str(),
                    &[lease.root.as_uuid(), &token, &term_millis(lease.term)],
                )
                .await
                .map_err(fail)?;
            match renewed {
                Some(_) => Ok(lease),
                None => Err(fenced(&inner, &client, &lease).await),
            }
        })
    }

    /// Lets `lease` lapse now, so another holder can take the tree at
    /// once. Its token stays: an append that presents it still passes
    /// until someone takes the tree.
    ///
    /// # Errors
    /// [`StoreError::Fenced`] when another holder took the tree already;
    /// [`StoreError::InvalidLease`] for a holder or term no lease may
    /// have; a database failure.
    pub fn release_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        check_lease_request(&lease.holder, lease.term)?;
        let lease = lease.clone();
        self.run(move |inner| async move {
            let client = inner.client("releasing a lease").await?;
            let fail = |err: tokio_postgres::Error| db_error("releasing a lease", &err);
            let Some(token) = stored_token(lease.token) else {
                return Err(fenced(&inner, &client, &lease).await);
            };
            let released = client
                .query_opt(
                    inner.sql.release_lease.as_str(),
                    &[lease.root.as_uuid(), &token],
                )
                .await
                .map_err(fail)?;
            match released {
                Some(_) => Ok(()),
                None => Err(fenced(&inner, &client, &lease).await),
            }
        })
    }

    /// Every tree's lease, by root.
    ///
    /// # Errors
    /// A database failure, or a stored token that is not positive.
    pub fn leases(&self) -> Result<Vec<LeaseRecord>, StoreError> {
        self.run(|inner| async move {
            let client = inner.client("listing leases").await?;
            let fail = |err: tokio_postgres::Error| db_error("listing leases", &err);
            let rows = client
                .query(inner.sql.list_leases.as_str(), &[])
                .await
                .map_err(fail)?;
            rows.iter()
                .map(|row| {
                    Ok(LeaseRecord {
                        root: SessionId::from_uuid(row.try_get(0).map_err(fail)?),
                        holder: row.try_get(1).map_err(fail)?,
                        token: token_of(&inner, row.try_get(2).map_err(fail)?)?,
                        remaining: remaining(row.try_get(3).map_err(fail)?),
                    })
                })
                .collect()
        })
    }
}

/// `token` as stored; `None` for one no lease can have (so it is stale).
fn stored_token(token: u64) -> Option<i64> {
    i64::try_from(token).ok()
}

/// A stored token, which is positive (the table's check).
fn token_of(inner: &Inner, token: i64) -> Result<u64, StoreError> {
    unsigned(token, |value| StoreError::Damaged {
        path: inner.place(),
        reason: format!("a lease's fencing token is {value}"),
    })
}

fn remaining(millis: i64) -> Duration {
    Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

/// The stored lease of `root`, if any.
async fn current(
    inner: &Inner,
    client: &deadpool_postgres::Client,
    root: SessionId,
) -> Result<Option<LeaseRecord>, StoreError> {
    let fail = |err: tokio_postgres::Error| db_error("reading a lease", &err);
    let row = client
        .query_opt(inner.sql.read_lease.as_str(), &[root.as_uuid()])
        .await
        .map_err(fail)?;
    row.map(|row| {
        Ok(LeaseRecord {
            root,
            holder: row.try_get(0).map_err(fail)?,
            token: token_of(inner, row.try_get(1).map_err(fail)?)?,
            remaining: remaining(row.try_get(2).map_err(fail)?),
        })
    })
    .transpose()
}

/// Why `lease`'s token no longer matches: [`StoreError::Fenced`] naming
/// the current holder (or the failure reading it).
async fn fenced(inner: &Inner, client: &deadpool_postgres::Client, lease: &Lease) -> StoreError {
    match current(inner, client, lease.root).await {
        Ok(held) => {
            let (current, holder) =
                held.map_or((0, String::new()), |held| (held.token, held.holder));
            StoreError::Fenced {
                root: lease.root,
                presented: lease.token,
                current,
                holder,
            }
        }
        Err(err) => err,
    }
}
