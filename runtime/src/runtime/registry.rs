//! The live provider registry: registering, removing, finding and listing
//! providers ([`ProviderRegistration`] removes its own).

use std::sync::Arc;

use subagent_core::{Event, SubagentError};
use subagent_projections::Command;

use crate::provider::SubagentProvider;

use super::{lock, Notice, SubagentRuntime};

/// The disposer of one provider registration.
pub struct ProviderRegistration {
    runtime: SubagentRuntime,
    name: String,
}

impl ProviderRegistration {
    /// The registered name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Unregisters the provider: new starts are refused; runs already
    /// returned to their holders continue.
    ///
    /// # Errors
    /// `subagent/unknown-provider` if it was already removed.
    pub async fn remove(self) -> Result<(), SubagentError> {
        self.runtime.remove_provider(&self.name).await
    }
}

impl SubagentRuntime {
    /// Registers a provider; it is recorded in the log and announced.
    ///
    /// # Errors
    /// `subagent/duplicate-provider`, `gateway/bad-request` for an empty name,
    /// `subagent/closed`.
    /// The returned [`ProviderRegistration`] is the disposer: `remove()` it
    /// to unregister. Dropping it leaves the provider registered.
    pub async fn register_provider(
        &self,
        provider: Arc<dyn SubagentProvider>,
    ) -> Result<ProviderRegistration, SubagentError> {
        self.ensure_open()?;
        let registration = Event::ProviderRegistered {
            name: provider.name().to_owned(),
            capabilities: provider.capabilities(),
            inherits_parent_context: provider.inherits_parent_context(),
            route_defaults: provider.agent_route_defaults(),
            continuable: provider.is_continuable(),
            one_shot: !provider.is_continuable(),
        };
        self.inner
            .engine
            .commit(Command::RegisterProvider { registration })
            .await?;
        let name = provider.name().to_owned();
        lock(&self.inner.providers).push(provider);
        self.notify(Notice::ProviderAdded(name.clone()));
        Ok(ProviderRegistration {
            runtime: self.clone(),
            name,
        })
    }

    /// Removes a provider: new starts are refused; accepted runs continue.
    ///
    /// # Errors
    /// `subagent/unknown-provider`, `subagent/closed`.
    pub async fn remove_provider(&self, name: &str) -> Result<(), SubagentError> {
        self.ensure_open()?;
        self.unregister(name).await
    }

    /// Records a provider's removal (also on `close`, past the gate).
    pub(crate) async fn unregister(&self, name: &str) -> Result<(), SubagentError> {
        self.inner
            .engine
            .commit(Command::RemoveProvider {
                name: name.to_owned(),
            })
            .await?;
        lock(&self.inner.providers).retain(|provider| provider.name() != name);
        self.notify(Notice::ProviderRemoved(name.to_owned()));
        Ok(())
    }

    /// The provider registered as `name` (`None` when absent).
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn get_provider(
        &self,
        name: &str,
    ) -> Result<Option<Arc<dyn SubagentProvider>>, SubagentError> {
        self.ensure_open()?;
        Ok(self.provider(name))
    }

    pub(crate) fn provider(&self, name: &str) -> Option<Arc<dyn SubagentProvider>> {
        lock(&self.inner.providers)
            .iter()
            .find(|provider| provider.name() == name)
            .cloned()
    }

    /// Registered provider names in insertion order.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn list(&self) -> Result<Vec<String>, SubagentError> {
        self.ensure_open()?;
        Ok(self.provider_names())
    }

    pub(crate) fn provider_names(&self) -> Vec<String> {
        lock(&self.inner.providers)
            .iter()
            .map(|provider| provider.name().to_owned())
            .collect()
    }
}
