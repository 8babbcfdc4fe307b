//! The searcher: what a searching process (the CLI, the MCP server, the viewer) holds to
//! search by meaning as well as by words: the sentence model, loaded on a thread of its
//! own, and the index of stored vectors, caught up before each search. The top of recall:
//! it calls `search` and `timeline` with the query's vector (`rank::Semantic`), embedded
//! on a thread of its own while the full-text side runs; nothing in recall calls it.
//! Without a model, searches run on full text alone and [`Searcher::unavailable`] says
//! why.

use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::recall::embed::index::VectorIndex;
use crate::recall::embed::model::{self, Embedder, ModelSource};
use crate::recall::query;
use crate::recall::rank::{Meaning, Promise, Semantic};
use crate::recall::search::{
    Hit, Measured, Order, SearchRequest, candidates_with, nearest, search_with,
};
use crate::recall::timeline::{Anchor, Timeline, TimelineRequest, timeline_with};
use crate::settings::{EmbedSettings, SearchSettings};
use crate::store::paths::DataDir;

/// What a searching process (the CLI, the MCP server) holds to search by meaning: the
/// model, loaded on a thread of its own from the start, and the index of stored vectors,
/// caught up before each search while the model may still be loading. Without a model,
/// searches run on full text alone and [`Searcher::unavailable`] says why.
#[derive(Debug)]
pub struct Searcher {
    loaded: std::result::Result<Loaded, String>,
    min_similarity: f32,
    /// The floor of a request that names none (the setting `search.min_relevance`).
    min_relevance: f64,
}

#[derive(Debug)]
struct Loaded {
    bert: Loading,
    index: VectorIndex,
    model: String,
}

/// A model being loaded on a thread of its own, or loaded: loading (the weights read and
/// laid out, ~150 ms on a slow core) takes as long as reading the index of a database of
/// 100,000 memories, and a fresh process needs both before it searches.
#[derive(Debug)]
struct Loading {
    pending: Mutex<Option<JoinHandle<std::result::Result<Embedder, String>>>>,
    done: OnceLock<std::result::Result<Embedder, String>>,
}

impl Loading {
    fn start(source: ModelSource) -> Loading {
        let load = move || {
            source.load().map_err(|e| {
                let why = e.to_string();
                log::info!("search by words only: {why}");
                why
            })
        };
        Loading {
            pending: Mutex::new(Some(std::thread::spawn(load))),
            done: OnceLock::new(),
        }
    }

    fn ready(bert: Embedder) -> Loading {
        Loading {
            pending: Mutex::new(None),
            done: OnceLock::from(Ok(bert)),
        }
    }

    /// Whether the load is over and failed (not waiting for it).
    fn failed(&self) -> bool {
        matches!(self.done.get(), Some(Err(_)))
    }

    /// The model, once loaded (waiting for it), or why it could not be.
    fn get(&self) -> std::result::Result<&Embedder, &str> {
        self.done
            .get_or_init(|| {
                let pending = self.pending.lock().map_or(None, |mut p| p.take());
                match pending.map(JoinHandle::join) {
                    Some(Ok(loaded)) => loaded,
                    Some(Err(_)) => Err("loading the model panicked".to_string()),
                    None => Err("the model's load was lost".to_string()),
                }
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

impl Searcher {
    /// Finds the model the settings name and starts loading it on a thread of its own. A
    /// missing or broken model is not an error here: search falls back to full text (and
    /// says why at `-v`).
    pub fn open(settings: &EmbedSettings, data: &DataDir) -> Searcher {
        let loaded = match model::locate(settings, data) {
            Ok(source) => Ok(Loaded {
                index: VectorIndex::new(&source.id),
                model: source.id.clone(),
                bert: Loading::start(source),
            }),
            Err(why) => {
                log::info!("search by words only: {why}");
                Err(why.to_string())
            }
        };
        Searcher::of(loaded, settings)
    }

    /// A searcher with the model `source` loaded as `bert`.
    pub fn with_model(source: ModelSource, bert: Embedder, settings: &EmbedSettings) -> Searcher {
        let loaded = Loaded {
            bert: Loading::ready(bert),
            index: VectorIndex::new(&source.id),
            model: source.id,
        };
        Searcher::of(Ok(loaded), settings)
    }

    fn of(loaded: std::result::Result<Loaded, String>, settings: &EmbedSettings) -> Searcher {
        Searcher {
            loaded,
            min_similarity: settings.min_similarity as f32,
            min_relevance: SearchSettings::default().min_relevance,
        }
    }

    /// Keeps the index's vectors in memory (`VectorIndex::keep_vectors`): for the worker,
    /// which answers every prompt's search by meaning.
    pub fn keep_vectors(&mut self) {
        if let Ok(l) = &mut self.loaded {
            l.index.keep_vectors();
        }
    }

    /// A searcher that never uses a model.
    pub fn full_text_only(why: &str) -> Searcher {
        Searcher {
            loaded: Err(why.to_string()),
            min_similarity: 1.0,
            min_relevance: SearchSettings::default().min_relevance,
        }
    }

    /// A search by relevance whose best hit is below `floor` (the setting
    /// `search.min_relevance`) returns nothing, when the request names no floor of its
    /// own.
    pub fn with_min_relevance(mut self, floor: f64) -> Searcher {
        self.min_relevance = floor;
        self
    }

    /// The floor a search by relevance of `req` is held to: its own, else the searcher's.
    pub fn floor(&self, req: &SearchRequest) -> f64 {
        req.min_relevance.unwrap_or(self.min_relevance)
    }

    /// Why search is full-text only, or `None` when the model is loaded (waiting for its
    /// load).
    pub fn unavailable(&self) -> Option<&str> {
        match &self.loaded {
            Ok(l) => l.bert.get().err(),
            Err(why) => Some(why),
        }
    }

    /// [`search_with`], by meaning too when a model is loaded and the query has words to
    /// rank by.
    pub fn search(&mut self, conn: &Connection, req: &SearchRequest) -> Result<Vec<Hit>> {
        let text = (req.order == Order::Relevance).then_some(req.query.as_str());
        let req = SearchRequest {
            min_relevance: Some(self.floor(req)),
            ..req.clone()
        };
        self.with_semantic(conn, text, |semantic| search_with(conn, &req, semantic))
    }

    /// [`candidates_with`]: what a search by relevance weighs, with meaning when a model
    /// is loaded.
    pub fn candidates(&mut self, conn: &Connection, req: &SearchRequest) -> Result<Vec<Measured>> {
        self.with_semantic(conn, Some(req.query.as_str()), |semantic| {
            candidates_with(conn, req, semantic)
        })
    }

    /// [`timeline_with`], a query anchor found by meaning too.
    pub fn timeline(&mut self, conn: &Connection, req: &TimelineRequest) -> Result<Timeline> {
        let text = match &req.anchor {
            Anchor::Query(text) => Some(text.as_str()),
            _ => None,
        };
        self.with_semantic(conn, text, |semantic| timeline_with(conn, req, semantic))
    }

    /// The query of `req` by meaning, with its nearest neighbours in `req`'s scope: what the
    /// worker sends a hook, which ranks them with its own full-text pools (see
    /// `rank::Semantic`). An error without a model.
    pub fn meaning(&mut self, conn: &Connection, req: &SearchRequest) -> Result<Meaning> {
        let l = self
            .loaded
            .as_mut()
            .map_err(|why| Error::Embedding(why.clone()))?;
        let began = std::time::Instant::now();
        l.index.refresh(conn)?;
        let refreshed = began.elapsed();
        let bert = l.bert.get().map_err(|why| Error::Embedding(why.into()))?;
        let vector = bert.embed_query(&req.query)?;
        let embedded = began.elapsed();
        let neighbours = nearest(conn, &l.index, &vector, req)?;
        log::debug!(
            "a query's meaning in {:.1} ms: index caught up in {:.1}, embedded in {:.1}, {} neighbours in {:.1}",
            began.elapsed().as_secs_f64() * 1e3,
            refreshed.as_secs_f64() * 1e3,
            (embedded - refreshed).as_secs_f64() * 1e3,
            neighbours.len(),
            (began.elapsed() - embedded).as_secs_f64() * 1e3,
        );
        Ok(Meaning {
            vector,
            model: l.model.clone(),
            min_similarity: self.min_similarity,
            neighbours: Some(neighbours),
        })
    }

    /// Runs `f` with the query vector of `text` when there is a model and `text` has words
    /// to rank by, else without.
    fn with_semantic<T>(
        &mut self,
        conn: &Connection,
        text: Option<&str>,
        f: impl FnOnce(Option<&Semantic>) -> Result<T>,
    ) -> Result<T> {
        let text = text.filter(|t| query::parse(t).fts_any().is_some());
        match (&mut self.loaded, text) {
            (Ok(l), Some(text)) if !l.bert.failed() => {
                // Caught up while the model may still be loading.
                l.index.refresh(conn)?;
                // The query is embedded on a thread of its own while the full-text side
                // of the search runs; ranking waits for the vector when it needs it.
                let bert = &l.bert;
                let meaning = OnceLock::new();
                std::thread::scope(|scope| {
                    // An embedding that fails leaves the meaning empty, and its error is
                    // the search's; a model that failed to load leaves it empty too, and
                    // the search is by words alone.
                    let embedding = scope.spawn(|| {
                        let promise = Promise(&meaning);
                        let Ok(bert) = bert.get() else {
                            return Ok(());
                        };
                        let vector = bert.embed_query(text)?;
                        promise.keep(Meaning {
                            vector,
                            model: l.model.clone(),
                            min_similarity: self.min_similarity,
                            neighbours: None,
                        });
                        Ok(())
                    });
                    let semantic = Semantic {
                        index: Some(&l.index),
                        meaning: &meaning,
                    };
                    let out = f(Some(&semantic));
                    match embedding.join() {
                        Ok(Ok(())) => out,
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(Error::Embedding("the query's embedding panicked".into())),
                    }
                })
            }
            _ => f(None),
        }
    }
}
