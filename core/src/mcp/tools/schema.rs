//! What the tools accept, as `tools/list` tells a client: their names, the bounds of their
//! arguments and their JSON Schemas. The lowest file of `tools`: the argument checks
//! ([`super::args`]) and the renderers ([`super::render`]) take their bounds from here.

use serde_json::{Value, json};

use crate::memory::observations::OBSERVATION_TYPES;

/// The tools `tools/list` lists and `tools/call` runs.
pub const TOOL_NAMES: &[&str] = &["search", "timeline", "get_observations", "save_memory"];

/// Most ids one `get_observations` call may ask for.
pub const MAX_IDS: usize = 50;
/// Most hits one `search` call may ask for.
pub const MAX_SEARCH_LIMIT: usize = 100;
/// Most records on either side of a `timeline` anchor.
pub const MAX_TIMELINE_SIDE: usize = 50;
/// Token budget of one tool result unless the call passes `max_tokens`: well under Claude
/// Code's limits on MCP tool output (a warning above 10,000 tokens, cut at 25,000 unless
/// `MAX_MCP_OUTPUT_TOKENS` says otherwise).
pub const DEFAULT_MAX_TOKENS: usize = 4_000;
/// Smallest `max_tokens` a call may pass.
pub const MIN_MAX_TOKENS: usize = 500;
/// Largest `max_tokens` a call may pass.
pub const MAX_MAX_TOKENS: usize = 20_000;

/// The tool definitions, with their JSON Schemas.
pub fn definitions() -> Value {
    let project = json!({
        "type": "string",
        "description": "Project name. Default: the project this server was started in."
    });
    let all_projects = json!({
        "type": "boolean",
        "default": false,
        "description": "Search every project instead of one; each line then shows its project."
    });
    let max_tokens = json!({
        "type": "integer",
        "minimum": MIN_MAX_TOKENS,
        "maximum": MAX_MAX_TOKENS,
        "default": DEFAULT_MAX_TOKENS,
        "description": "Token budget of this result (characters / 4). What does not fit is left out, and the result ends saying which records and how to get them."
    });
    json!([
        {
            "name": "search",
            "title": "Search memory",
            "description": "Step 1 of 3. Search this project's memory of past sessions: observations (what was \
    learned, decided, fixed), turn summaries and user prompts. Returns a compact index, one line per hit: \
    id, date, type, title and a snippet with matches in **bold**. Cheap: run it first, then call \
    `timeline` around an interesting id (step 2) and `get_observations` for the few ids you need in \
    full (step 3). Query language: words (all must match), \"exact phrase\", -excluded, a OR b, prefix*. \
    An empty query lists the newest records matching the filters.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": { "type": "string", "description": "Words to find, e.g. `lease rescue`, `\"busy timeout\" -test`, `sqlite OR postgres`, `migrat*`." },
                    "type": {
                        "description": "Only observations of this type (or any of these types).",
                        "anyOf": [
                            { "type": "string", "enum": OBSERVATION_TYPES },
                            { "type": "array", "items": { "type": "string", "enum": OBSERVATION_TYPES } }
                        ]
                    },
                    "concept": { "type": "string", "description": "Only observations tagged with this concept, e.g. `gotcha`, `how-it-works`, `trade-off`." },
                    "file": { "type": "string", "description": "Only records that read or modified a file whose path contains this text, e.g. `src/db.rs`." },
                    "since": { "type": "string", "description": "Only records from this time on: a UTC date `2026-01-31`, or an age like `7d`, `12h`, `2w`." },
                    "until": { "type": "string", "description": "Only records before this time (same forms as `since`)." },
                    "kind": { "type": "string", "enum": ["all", "observations", "summaries", "prompts"], "default": "all", "description": "Which records to search." },
                    "order": { "type": "string", "enum": ["relevance", "newest", "oldest"], "default": "relevance" },
                    "limit": { "type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "default": 20 },
                    "offset": { "type": "integer", "minimum": 0, "default": 0, "description": "Skip this many hits (paging)." },
                    "project": project,
                    "all_projects": all_projects,
                    "max_tokens": max_tokens
                },
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "timeline",
            "title": "Timeline around a memory",
            "description": "Step 2 of 3. Show what happened around one record, in time order: the observations, \
    turn summaries and prompts before and after it, the anchor marked with →. Give `anchor` (an \
    id from `search`) or `query` (its best hit becomes the anchor). Use it to understand \
    the context of a hit before fetching full details with `get_observations`.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "anchor": { "type": ["integer", "string"], "description": "Id to centre on, as search lists it: an observation as an integer (12), a turn summary or prompt as a string (\"S3\", \"P7\")." },
                    "query": { "type": "string", "description": "Instead of an id: centre on the best hit of this search." },
                    "before": { "type": "integer", "minimum": 0, "maximum": MAX_TIMELINE_SIDE, "default": 5, "description": "Records before the anchor." },
                    "after": { "type": "integer", "minimum": 0, "maximum": MAX_TIMELINE_SIDE, "default": 5, "description": "Records after the anchor." },
                    "project": project,
                    "all_projects": all_projects,
                    "max_tokens": max_tokens
                },
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "get_observations",
            "title": "Fetch observations in full",
            "description": "Step 3 of 3. Fetch full records by id: an observation's narrative, facts, concepts, \
    files read and modified, session and the user's prompt; a turn summary's sections (S ids); a prompt's \
    text (P ids). Costs more tokens than the index, so ask only for the ids that matter (from `search` or \
    `timeline`). Returned in the order asked, within `max_tokens`; unknown ids and ids left out for the budget \
    are listed.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "ids": {
                        "type": "array",
                        "items": { "type": ["integer", "string"] },
                        "minItems": 1,
                        "maxItems": MAX_IDS,
                        "description": "Ids as search and timeline list them: observations as integers, turn summaries and prompts as strings, e.g. [12, 15, \"S3\", \"P7\"]."
                    },
                    "max_tokens": max_tokens
                },
                "required": ["ids"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": "save_memory",
            "title": "Save a memory",
            "description": "Store something worth remembering in later sessions (a decision and its reason, a \
    gotcha, how something works). It becomes an observation of the current project, found by \
    `search` from then on. Write a specific title and self-contained text. Saving the same memory again \
    stores nothing new and answers with the id it already has.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "title": { "type": "string", "description": "One short line naming the memory." },
                    "text": { "type": "string", "description": "What to remember, in full sentences." },
                    "type": { "type": "string", "enum": OBSERVATION_TYPES, "default": "discovery" },
                    "files": { "type": "array", "items": { "type": "string" }, "description": "Files it is about." },
                    "concepts": { "type": "array", "items": { "type": "string" }, "description": "Tags, e.g. gotcha, trade-off." },
                    "project": project
                },
                "required": ["title", "text"],
                "additionalProperties": false
            },
            "annotations": { "readOnlyHint": false, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false }
        }
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_schemas_are_objects_with_descriptions() {
        let tools = definitions();
        for t in tools.as_array().expect("array") {
            assert_eq!(t["inputSchema"]["type"], json!("object"), "{t}");
            assert!(
                t["description"].as_str().is_some_and(|d| d.len() > 100),
                "{t}"
            );
        }
    }
}
