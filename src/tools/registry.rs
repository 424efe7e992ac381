//! The tool catalogue of this process: every enabled tool with its compiled argument schema and its
//! effective policy (the tool's declared defaults tightened or overridden by `[tools.<name>]`).
//!
//! Built once at start and shared by every session as an `Arc`; nothing in it changes afterwards.
//! Tools that come and go at run time (MCP servers, `src/mcp/`) are joined by building a new
//! registry with [`ToolRegistry::with_extra`]; a session keeps the one it started with. Their
//! names are reserved from the start ([`ToolRegistry::with_reserved`]), so a server that is down
//! when a session starts does not free its tools' names for the client's own tools.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jsonschema::Validator;
use serde_json::{Value, json};

use super::{KNOWN_TOOLS, Tool, ToolError, ToolSpec, schema};
use crate::config::{Config, ToolsConfig};
use crate::policy::Principal;

/// Why the registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tool {tool}: its argument schema does not compile: {reason}")]
    BadSchema { tool: &'static str, reason: String },
    #[error("tool {0} is registered twice")]
    Duplicate(&'static str),
    #[error("backend for {family} tools: {reason}")]
    Backend { family: &'static str, reason: String },
}

/// The policy in force for one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPolicy {
    pub rate_limit_per_minute: u32,
    pub timeout: Duration,
    pub requires_confirmation: bool,
    /// Roles allowed to call the tool; empty = every authenticated user.
    pub roles: Vec<String>,
}

/// A tool ready to be called: the tool, its compiled schema, its policy and its model-facing
/// definition.
pub struct RegisteredTool {
    pub tool: Arc<dyn Tool>,
    pub policy: ToolPolicy,
    validator: Validator,
    definition: Value,
}

impl RegisteredTool {
    /// Compile the tool's argument schema and its model-facing definition under `policy`.
    pub fn new(tool: Arc<dyn Tool>, policy: ToolPolicy) -> Result<Self, RegistryError> {
        let spec = tool.spec();
        let validator = schema::compile(&spec.parameters)
            .map_err(|reason| RegistryError::BadSchema { tool: spec.name, reason })?;
        let definition = json!({
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        });
        Ok(RegisteredTool { tool, policy, validator, definition })
    }

    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    pub fn name(&self) -> &'static str {
        self.tool.spec().name
    }

    /// The realtime `session.tools` entry for this tool.
    pub fn definition(&self) -> &Value {
        &self.definition
    }

    /// Check arguments against the compiled schema.
    pub fn validate(&self, args: &Value) -> Result<(), ToolError> {
        schema::check(&self.validator, args)
    }

    /// May this principal call the tool?
    pub fn permits(&self, principal: &Principal) -> bool {
        self.policy.roles.is_empty() || self.policy.roles.iter().any(|r| principal.roles.contains(r))
    }
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool").field("name", &self.name()).field("policy", &self.policy).finish()
    }
}

/// The enabled tools, by name.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<&'static str, Arc<RegisteredTool>>,
    /// Names of tools that may join at run time (every allowed MCP `SERVER__TOOL`), whether
    /// or not they are in `tools` now.
    reserved: BTreeSet<&'static str>,
}

impl ToolRegistry {
    /// Build every tool family whose backend is configured (or has an embedded default).
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        tools.push(Arc::new(super::calculators::tool()));
        tools.push(Arc::new(super::pubmed::tool(&config.backends.pubmed)?));
        tools.extend(super::calendar::tools(&config.backends.calendar)?);
        tools.extend(super::files::tools(&config.backends.files)?);
        tools.push(Arc::new(super::guidelines::tool(&config.backends.guidelines)?));
        tools.push(Arc::new(super::ddx::tool(&config.backends.ddx)?));
        if let Some(web) = super::web_search::tool(&config.backends.web_search)? {
            tools.push(Arc::new(web));
        }
        if let Some(evidence) = super::evidence::tool(&config.backends.evidence)? {
            tools.push(Arc::new(evidence));
        }
        Self::from_tools(tools, &config.tools)
    }

    /// Register the given tools with the config's overrides; disabled tools are left out.
    pub fn from_tools(tools: Vec<Arc<dyn Tool>>, config: &ToolsConfig) -> Result<Self, RegistryError> {
        let mut registry = ToolRegistry::default();
        for tool in tools {
            let spec = tool.spec();
            let over = config.per_tool.get(spec.name).cloned().unwrap_or_default();
            if over.enabled == Some(false) {
                continue;
            }
            let policy = ToolPolicy {
                rate_limit_per_minute: over.rate_limit_per_minute.unwrap_or(spec.rate_limit_per_minute),
                timeout: over.timeout_ms.map(Duration::from_millis).unwrap_or(spec.timeout),
                // Confirmation can be turned on for any tool, never off for one that changes data.
                requires_confirmation: spec.requires_confirmation
                    || over.requires_confirmation.unwrap_or(false),
                roles: over.roles.unwrap_or_default(),
            };
            let name = spec.name;
            let entry = Arc::new(RegisteredTool::new(tool, policy)?);
            if registry.tools.insert(name, entry).is_some() {
                return Err(RegistryError::Duplicate(name));
            }
        }
        Ok(registry)
    }

    /// This catalogue plus `extra` (tools that join at run time, e.g. MCP tools); a name already
    /// taken keeps its first tool.
    pub fn with_extra(&self, extra: impl IntoIterator<Item = Arc<RegisteredTool>>) -> Self {
        let mut tools = self.tools.clone();
        for tool in extra {
            tools.entry(tool.name()).or_insert(tool);
        }
        ToolRegistry { tools, reserved: self.reserved.clone() }
    }

    /// This catalogue with `names` reserved as server tool names ([`Self::is_server_tool_name`])
    /// even while no tool of that name is registered: a client tool with such a name would
    /// otherwise answer the model's calls to it with no validation, confirmation or audit.
    pub fn with_reserved(&self, names: impl IntoIterator<Item = &'static str>) -> Self {
        let mut reserved = self.reserved.clone();
        reserved.extend(names);
        ToolRegistry { tools: self.tools.clone(), reserved }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.tools.get(name)
    }

    /// Names reserved for server tools: a client may not define a tool with one of these, enabled
    /// here or not, and an allowed MCP tool's name whether its server is up or not.
    pub fn is_server_tool_name(&self, name: &str) -> bool {
        self.tools.contains_key(name) || KNOWN_TOOLS.contains(&name) || self.reserved.contains(name)
    }

    /// The tools this principal may call, in name order.
    pub fn allowed_for<'a>(&'a self, principal: &'a Principal) -> impl Iterator<Item = &'a Arc<RegisteredTool>> {
        self.tools.values().filter(move |t| t.permits(principal))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<RegisteredTool>> {
        self.tools.values()
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
