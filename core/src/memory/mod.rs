//! Memory: what cairn remembers. The kinds of memory and how their ids are written
//! (`kind`). Sessions and the user's prompts (`sessions`), the
//! observations and turn summaries the worker distils from them (`observations`), and
//! what the user asked to forget (`forgotten`), which nothing may bring back, and what each
//! session was already given of it (`told`). Which other device a memory came from, as
//! sync listed it (`origin`, a reader of sync's tables).
//!
//! Owns and is the only writer of `sessions`, `user_prompts`, `observations`,
//! `session_summaries`, `memory_given` (through `told`) and `forgotten` (tombstones, written only by `forgotten`; `forget`
//! deletes memories and leaves their tombstones through it); the full-text indexes follow
//! those tables through the migration's triggers. Capture writes sessions and prompts
//! through it, the worker observations and summaries (inside the queue's ack transaction),
//! and `save_memory` and the importers both.
//!
//! `rows`, the lowest file, holds what the others share: `ObservationContent` (what an
//! observation says, one type from the model-output parser to the stored row) and the one
//! reader of observation and summary rows (their columns and row → struct mapping), which
//! the timeline, export and the viewer use.
//!
//! Invariants: an observation's content hash is unique per session, so storing the same
//! content twice is one row; one summary per turn; a prompt whose `prompt_id` is already
//! stored is not stored or counted again; `facts_text`/`concepts_text` hold the plain text
//! of the JSON lists so search sees words, not JSON. Reads the store only.

pub mod forget;
pub mod forgotten;
pub mod kind;
pub mod observations;
pub mod origin;
pub mod rows;
pub mod sessions;
pub mod told;
