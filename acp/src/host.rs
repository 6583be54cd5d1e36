//! [`AcpHost`]: the host seam for ACP children. It wraps the host's own
//! [`AgentHost`] and builds an [`AcpAgent`] for every session created by a
//! provider it routes (by provider name) to an [`AcpCommand`]; every other
//! session's agent comes from the wrapped host.
//!
//! It also lists, beside the wrapped host's tools, the tools an ACP
//! agent's calls are recorded as, so a tool filter can restrict them:
//! `acp/<kind>` for the agent's own tools (`acp/execute`, `acp/edit`, …;
//! their permission requests are refused when restricted) and
//! `fs/read_text_file` and `fs/write_text_file` for the client file
//! capabilities. It executes the file tools itself, confined to the
//! command's working directory; an `acp/<kind>` call is never executed by
//! the host (the agent runs its own tools).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use subagent_core::{ContentBlock, SessionId, SubagentError};
use subagent_runtime::{
    Agent, AgentHost, AgentSpec, BoxFuture, InputRoute, ToolCall, ToolDefinition, ToolOutput,
};
use tokio_util::sync::CancellationToken;

use crate::agent::AcpAgent;
use crate::command::AcpCommand;
use crate::mapping::{AGENT_TOOL_PREFIX, READ_TEXT_FILE, TOOL_KINDS, WRITE_TEXT_FILE};

/// The largest file `fs/read_text_file` returns.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// A host whose ACP-routed sessions run on agent processes.
pub struct AcpHost {
    inner: Arc<dyn AgentHost>,
    routes: HashMap<String, AcpCommand>,
    /// Each ACP session's working directory, for confining its file calls.
    workspaces: Mutex<HashMap<SessionId, PathBuf>>,
}

impl AcpHost {
    /// Wraps `inner`, routing nothing yet.
    #[must_use]
    pub fn new(inner: Arc<dyn AgentHost>) -> AcpHost {
        AcpHost {
            inner,
            routes: HashMap::new(),
            workspaces: Mutex::new(HashMap::new()),
        }
    }

    /// Sessions created by the provider registered as `provider` run on
    /// `command`.
    #[must_use]
    pub fn route(mut self, provider: &str, command: AcpCommand) -> AcpHost {
        self.routes.insert(provider.to_owned(), command);
        self
    }

    /// The command `spec`'s session runs on, if its provider is routed.
    fn command_of(&self, spec: &AgentSpec) -> Option<&AcpCommand> {
        let provider = spec.descriptor.as_ref()?.provider.as_str();
        self.routes.get(provider)
    }

    /// The directory `session`'s file calls are confined to.
    fn workspace(&self, session: SessionId) -> Option<PathBuf> {
        self.workspaces
            .lock()
            .ok()
            .and_then(|workspaces| workspaces.get(&session).cloned())
    }
}

/// The tools an ACP agent's calls are recorded as.
#[must_use]
pub fn acp_tools() -> Vec<ToolDefinition> {
    let mut tools: Vec<ToolDefinition> = TOOL_KINDS
        .iter()
        .map(|kind| {
            ToolDefinition::new(
                &format!("{AGENT_TOOL_PREFIX}{kind}"),
                &format!("an ACP agent's own {kind} tool (run by the agent after permission)"),
            )
        })
        .collect();
    tools.push(ToolDefinition::new(
        READ_TEXT_FILE,
        "read a text file in the agent's working directory",
    ));
    tools.push(ToolDefinition::new(
        WRITE_TEXT_FILE,
        "write a text file in the agent's working directory",
    ));
    tools
}

/// Whether `name` is one of [`acp_tools`].
fn is_acp_tool(name: &str) -> bool {
    name.starts_with(AGENT_TOOL_PREFIX) || name == READ_TEXT_FILE || name == WRITE_TEXT_FILE
}

/// `path` made absolute against `root` and normalized without touching
/// the disk; `None` when it climbs out of `root`.
fn confined(root: &Path, path: &str) -> Option<PathBuf> {
    let joined = root.join(path);
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                if !normal.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal.starts_with(root).then_some(normal)
}

/// Why a path may not be touched.
fn outside() -> ToolOutput {
    ToolOutput::error("the file resolves outside the agent's working directory")
}

/// Opens `path` of `root` for a file call: its directory, resolved through
/// any links, must lie inside `root` resolved, and the file itself is
/// opened without following a link (`O_NOFOLLOW`) and must be a regular
/// file. A directory component swapped for a link between the check and
/// the open is the one race left (there is no `openat2` beneath-only
/// resolution in std).
fn open_inside(root: &Path, path: &Path, write: bool) -> Result<std::fs::File, ToolOutput> {
    use std::os::unix::fs::OpenOptionsExt;
    let resolved_root = std::fs::canonicalize(root).map_err(|_| outside())?;
    let parent = path.parent().ok_or_else(outside)?;
    let resolved_parent = std::fs::canonicalize(parent)
        .map_err(|err| ToolOutput::error(format!("the file's directory: {}", err.kind())))?;
    if !resolved_parent.starts_with(&resolved_root) {
        return Err(outside());
    }
    let mut options = std::fs::OpenOptions::new();
    // No following a last-component link; a FIFO must not block the open.
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    if write {
        options.write(true).create(true).truncate(true);
    } else {
        options.read(true);
    }
    let file = options.open(path).map_err(|err| match err.raw_os_error() {
        Some(libc::ELOOP) => outside(),
        _ => ToolOutput::error(format!(
            "{} the file: {}",
            if write { "writing" } else { "reading" },
            err.kind()
        )),
    })?;
    let meta = file
        .metadata()
        .map_err(|err| ToolOutput::error(format!("the file: {}", err.kind())))?;
    if !meta.is_file() {
        return Err(ToolOutput::error("not a regular file"));
    }
    Ok(file)
}

/// Reads (`line`, `limit` in lines, 1-based; at most [`MAX_READ_BYTES`])
/// or writes one file of `root`, confined as [`open_inside`] says.
fn file_call(root: &Path, call: &ToolCall) -> ToolOutput {
    use std::io::{Read, Write};
    let Some(path) = call.input.get("path").and_then(Value::as_str) else {
        return ToolOutput::error("the call names no path");
    };
    let Some(path) = confined(root, path) else {
        return ToolOutput::error(format!("{path} is outside the agent's working directory"));
    };
    let done = |text: String| ToolOutput {
        output: vec![ContentBlock::text(text)],
        is_error: false,
        refused: false,
    };
    if call.name == READ_TEXT_FILE {
        let file = match open_inside(root, &path, false) {
            Ok(file) => file,
            Err(refusal) => return refusal,
        };
        let mut bytes = Vec::new();
        if let Err(err) = file.take(MAX_READ_BYTES + 1).read_to_end(&mut bytes) {
            return ToolOutput::error(format!("reading the file: {}", err.kind()));
        }
        if bytes.len() as u64 > MAX_READ_BYTES {
            return ToolOutput::error(format!("the file is over {MAX_READ_BYTES} bytes"));
        }
        let Ok(text) = String::from_utf8(bytes) else {
            return ToolOutput::error("the file is not UTF-8 text");
        };
        let line = call
            .input
            .get("line")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1);
        let limit = call.input.get("limit").and_then(Value::as_u64);
        let skip = usize::try_from(line - 1).unwrap_or(usize::MAX);
        let take = limit
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(usize::MAX);
        let selected: Vec<&str> = text.split_inclusive('\n').skip(skip).take(take).collect();
        return done(selected.concat());
    }
    let Some(content) = call.input.get("content").and_then(Value::as_str) else {
        return ToolOutput::error("the call has no content");
    };
    let mut file = match open_inside(root, &path, true) {
        Ok(file) => file,
        Err(refusal) => return refusal,
    };
    match file.write_all(content.as_bytes()) {
        Ok(()) => done(format!("wrote {} bytes", content.len())),
        Err(err) => ToolOutput::error(format!("writing the file: {}", err.kind())),
    }
}

impl AgentHost for AcpHost {
    fn create(&self, spec: AgentSpec) -> BoxFuture<'static, Result<Box<dyn Agent>, SubagentError>> {
        let Some(command) = self.command_of(&spec).cloned() else {
            // The ACP tools are for ACP agents: the host's own agents do not
            // see them (they could only fail).
            let mut spec = spec;
            spec.tools.retain(|tool| !is_acp_tool(&tool.name));
            return self.inner.create(spec);
        };
        if let Ok(mut workspaces) = self.workspaces.lock() {
            workspaces.insert(spec.session, command.cwd.clone());
        }
        let agent = AcpAgent::new(command, &spec);
        Box::pin(async move { Ok(Box::new(agent) as Box<dyn Agent>) })
    }

    fn tools(&self) -> Vec<ToolDefinition> {
        let mut tools = self.inner.tools();
        for tool in acp_tools() {
            if !tools.iter().any(|known| known.name == tool.name) {
                tools.push(tool);
            }
        }
        tools
    }

    fn accepts_image_input(&self, route: &InputRoute<'_>) -> bool {
        self.inner.accepts_image_input(route)
    }

    fn execute_tool(
        &self,
        session: SessionId,
        call: ToolCall,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        if call.name == READ_TEXT_FILE || call.name == WRITE_TEXT_FILE {
            let Some(root) = self.workspace(session) else {
                return Box::pin(async { ToolOutput::error("this session has no ACP workspace") });
            };
            return Box::pin(async move {
                tokio::task::spawn_blocking(move || file_call(&root, &call))
                    .await
                    .unwrap_or_else(|_| ToolOutput::error("the file call failed"))
            });
        }
        if call.name.starts_with(AGENT_TOOL_PREFIX) {
            let name = call.name;
            return Box::pin(async move {
                ToolOutput::error(format!(
                    "{name} is run by the ACP agent itself, not the host"
                ))
            });
        }
        self.inner.execute_tool(session, call, cancel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_stay_inside_the_workspace() {
        let root = Path::new("/work/space");
        assert_eq!(
            confined(root, "a/b.txt"),
            Some(PathBuf::from("/work/space/a/b.txt"))
        );
        assert_eq!(
            confined(root, "/work/space/c"),
            Some(PathBuf::from("/work/space/c"))
        );
        assert_eq!(confined(root, "../other"), None);
        assert_eq!(confined(root, "a/../../x"), None);
        assert_eq!(confined(root, "/etc/passwd"), None);
    }

    #[test]
    fn a_read_takes_lines_and_a_write_lands_inside_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "one\ntwo\nthree\n").unwrap();
        let read = |input: Value| {
            file_call(
                dir.path(),
                &ToolCall {
                    call_id: "1".into(),
                    name: READ_TEXT_FILE.into(),
                    input,
                },
            )
        };
        assert_eq!(
            read(json!({"path": "f.txt"})).output,
            vec![ContentBlock::text("one\ntwo\nthree\n")]
        );
        assert_eq!(
            read(json!({"path": "f.txt", "line": 2, "limit": 1})).output,
            vec![ContentBlock::text("two\n")]
        );
        assert!(read(json!({"path": "../f.txt"})).is_error);
        assert!(read(json!({"path": "missing.txt"})).is_error);
        let write = file_call(
            dir.path(),
            &ToolCall {
                call_id: "2".into(),
                name: WRITE_TEXT_FILE.into(),
                input: json!({"path": "out.txt", "content": "hi"}),
            },
        );
        assert!(!write.is_error);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
            "hi"
        );
        std::os::unix::fs::symlink("/etc", dir.path().join("escape")).unwrap();
        assert!(read(json!({"path": "escape/hostname"})).is_error);
        // A dangling link to outside is not written through.
        let outside_dir = tempfile::tempdir().unwrap();
        let target = outside_dir.path().join("planted");
        std::os::unix::fs::symlink(&target, dir.path().join("dangling")).unwrap();
        let through = file_call(
            dir.path(),
            &ToolCall {
                call_id: "3".into(),
                name: WRITE_TEXT_FILE.into(),
                input: json!({"path": "dangling", "content": "gotcha"}),
            },
        );
        assert!(through.is_error, "{through:?}");
        assert!(
            !target.exists(),
            "the write escaped through a dangling link"
        );
        // A link to a file inside is not followed either.
        std::os::unix::fs::symlink(dir.path().join("f.txt"), dir.path().join("alias")).unwrap();
        assert!(read(json!({"path": "alias"})).is_error);
        // A FIFO neither blocks nor reads.
        let fifo = dir.path().join("pipe");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        assert!(read(json!({"path": "pipe"})).is_error);
        // Over the cap is refused.
        let big = vec![b'a'; usize::try_from(MAX_READ_BYTES).unwrap() + 1];
        std::fs::write(dir.path().join("big.txt"), big).unwrap();
        assert!(read(json!({"path": "big.txt"})).is_error);
    }
}
