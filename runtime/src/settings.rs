//! The deployment's settings as the runtime holds them: persona variables,
//! model selection, the user's depth setting, the host's tools, and the
//! redaction of diagnostics. Each start decides against one snapshot
//! ([`StartSettings`]), so changing a setting never races a start halfway.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use subagent_core::redact::Redactor;
use subagent_core::{
    AttachmentLimits, DepthPolicy, Diagnostic, Event, ModelSelectionSettings, SessionId,
    StartSettings, StreamId, SubagentError,
};
use subagent_store::EventLogExt;

use crate::runtime::{lock, SubagentRuntime};
use crate::tools::ToolDefinition;

/// What the runtime keeps of the deployment.
pub(crate) struct Deployment {
    /// The snapshot the next start decides against.
    settings: Mutex<Arc<StartSettings>>,
    /// The user's delegation-depth setting, read by `resolve_max_depth`.
    max_depth: Mutex<Option<u64>>,
    /// The host's tools, read once at open.
    pub(crate) tools: Vec<ToolDefinition>,
    /// The process environment's values, never to appear in a diagnostic.
    environment: Redactor,
    /// The caps a prompt's images face.
    pub(crate) attachments: Mutex<AttachmentLimits>,
    /// The roots whose trees are not offered the delegation tools.
    pub(crate) delegation_off: Mutex<std::collections::HashSet<SessionId>>,
}

impl Deployment {
    /// Reads the host's tools and the process environment.
    pub(crate) fn new(tools: Vec<ToolDefinition>) -> Self {
        let mut environment = Redactor::new();
        environment.add_environment(
            std::env::vars_os().filter_map(|(key, value)| {
                Some((key.into_string().ok()?, value.into_string().ok()?))
            }),
        );
        // A filter may name the host's tools and the delegation tools.
        let settings = StartSettings {
            tools: tools
                .iter()
                .map(|tool| tool.name.clone())
                .chain(
                    crate::delegation::NAMES
                        .iter()
                        .map(|name| (*name).to_owned()),
                )
                .collect(),
            ..StartSettings::default()
        };
        Deployment {
            settings: Mutex::new(Arc::new(settings)),
            max_depth: Mutex::new(None),
            tools,
            environment,
            attachments: Mutex::new(AttachmentLimits::DEFAULT),
            delegation_off: Mutex::default(),
        }
    }

    /// The snapshot one start decides against.
    pub(crate) fn snapshot(&self) -> Arc<StartSettings> {
        Arc::clone(&lock(&self.settings))
    }

    fn update(&self, change: impl FnOnce(&mut StartSettings)) {
        let mut current = lock(&self.settings);
        let mut next = StartSettings::clone(&current);
        change(&mut next);
        *current = Arc::new(next);
    }
}

impl SubagentRuntime {
    /// Registers the deployment's persona variables. A child's persona may
    /// name only these; it is validated at start and rendered for the agent.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn set_persona_variables(
        &self,
        variables: BTreeMap<String, String>,
    ) -> Result<(), SubagentError> {
        self.ensure_open()?;
        self.inner
            .deployment
            .update(|settings| settings.persona_variables = variables);
        Ok(())
    }

    /// Replaces the model selection settings read by later starts.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn set_model_selection(
        &self,
        selection: ModelSelectionSettings,
    ) -> Result<(), SubagentError> {
        self.ensure_open()?;
        self.inner
            .deployment
            .update(|settings| settings.model_selection = selection);
        Ok(())
    }

    /// The current model selection (`subagentModelSelection.current()`): a
    /// detached copy.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn model_selection(&self) -> Result<ModelSelectionSettings, SubagentError> {
        self.ensure_open()?;
        Ok(self.inner.deployment.snapshot().model_selection.clone())
    }

    /// Sets the user's delegation-depth setting (`None`: no cap).
    ///
    /// # Errors
    /// `subagent/invalid-depth` above 2^53 - 1; the setting is unchanged.
    /// `subagent/closed`.
    pub fn set_max_depth_setting(&self, setting: Option<u64>) -> Result<(), SubagentError> {
        self.ensure_open()?;
        subagent_core::resolve_max_depth(None, setting)?;
        *lock(&self.inner.deployment.max_depth) = setting;
        Ok(())
    }

    /// Whether the agents of `root`'s tree are offered the runtime's
    /// delegation tools (`subagent`, `list_agents`, `send_message`,
    /// `subagent_control`); they are by default. Off, the tools are left
    /// out of every session built from then on, and a call of one is
    /// refused. A setting of this host, not recorded in the log: a host
    /// sets it again after a restart.
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn set_delegation(&self, root: SessionId, offered: bool) -> Result<(), SubagentError> {
        self.ensure_open()?;
        let mut off = lock(&self.inner.deployment.delegation_off);
        if offered {
            off.remove(&root);
        } else {
            off.insert(root);
        }
        Ok(())
    }

    /// Whether `session`'s tree is offered the delegation tools.
    pub(crate) fn delegation_offered(&self, session: SessionId) -> bool {
        let root = self.root_of(session).unwrap_or(session);
        !lock(&self.inner.deployment.delegation_off).contains(&root)
    }

    /// Resolves a delegation tool's depth policy against the user's setting
    /// (`resolveMaxDepth`); the rule is [`subagent_core::resolve_max_depth`].
    ///
    /// # Errors
    /// `subagent/invalid-depth` for a limit above 2^53 - 1; `subagent/closed`.
    pub fn resolve_max_depth(
        &self,
        configured: Option<DepthPolicy>,
    ) -> Result<Option<u64>, SubagentError> {
        self.ensure_open()?;
        let setting = *lock(&self.inner.deployment.max_depth);
        subagent_core::resolve_max_depth(configured, setting)
    }

    /// The host's tools (what a filter may name).
    ///
    /// # Errors
    /// `subagent/closed`.
    pub fn tools(&self) -> Result<&[ToolDefinition], SubagentError> {
        self.ensure_open()?;
        Ok(&self.inner.deployment.tools)
    }

    /// A redactor for text about `session`: the environment's values, and
    /// every tool input and output the session recorded (file contents
    /// arrive as tool outputs).
    pub(crate) fn redactor_for(&self, session: SessionId) -> Redactor {
        let mut redactor = self.inner.deployment.environment.clone();
        for record in self.log().read_stream(StreamId::Session(session), 1) {
            match record.map(|record| record.event) {
                Ok(Event::ToolCalled { input, .. }) => redactor.add_json(&input),
                Ok(Event::ToolReturned { output, .. }) => {
                    redactor.add_text(&subagent_core::content::plain_text(&output));
                }
                Ok(_) => {}
                // Unreadable history: the environment and shapes still apply.
                Err(_) => break,
            }
        }
        redactor
    }

    /// Text from a provider or agent about `session`, made safe to record.
    pub(crate) fn clean_diagnostic(&self, session: SessionId, text: &str) -> Diagnostic {
        self.redactor_for(session).clean(text)
    }

    /// A provider's error about `session`, made safe to return and record.
    pub(crate) fn clean_error(&self, session: SessionId, error: SubagentError) -> SubagentError {
        let redactor = self.redactor_for(session);
        error.map_messages(&|text| redactor.clean(text).as_str().to_owned())
    }
}
