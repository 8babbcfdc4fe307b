//! The model-output parser: finds every `<observation>` and the `<summary>` in a model's
//! reply, wherever they sit (prose, code fences), and keeps whatever fields it got.
//!
//! Invariants:
//! - parsing never fails and never panics: any input gives a [`Parsed`] value (property
//!   tests and the `parse_reply` fuzz target check this);
//! - it tolerates bare `&` and `<`, unclosed, repeated or unknown tags, missing fields and
//!   odd whitespace; an unclosed field ends where the next known tag starts;
//! - pure: no I/O, no clock.
//!
//! Deciding what a reply *means* (usable, explicitly empty, or a failed attempt) is
//! [`Parsed::observations_outcome`] and [`Parsed::summary_outcome`].

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use crate::memory::rows::ObservationContent;
use crate::text;

/// The explicit "nothing worth recording" answer the prompt asks for.
pub const EMPTY_ANSWER: &str = "<none/>";

/// One observation as the model wrote it: the type is the model's word, not yet mapped
/// to a known type; the content is what gets stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedObservation {
    pub kind: String,
    pub content: ObservationContent,
}

impl ParsedObservation {
    /// True when the model gave nothing a reader could use.
    pub fn is_blank(&self) -> bool {
        self.content.is_blank()
    }

    /// Fills a missing title from the subtitle, the first fact or the narrative, so a
    /// stored observation always has one.
    fn ensure_title(&mut self) {
        let c = &mut self.content;
        if !c.title.is_empty() {
            return;
        }
        let source = [&c.subtitle, &c.narrative]
            .into_iter()
            .chain(c.facts.first())
            .find(|s| !s.is_empty())
            .cloned()
            .unwrap_or_default();
        c.title = first_words(&source, 80);
    }
}

/// A turn summary as the model wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParsedSummary {
    pub request: String,
    pub investigated: String,
    pub learned: String,
    pub completed: String,
    pub next_steps: String,
    pub notes: String,
}

impl ParsedSummary {
    fn is_blank(&self) -> bool {
        [
            &self.request,
            &self.investigated,
            &self.learned,
            &self.completed,
            &self.next_steps,
            &self.notes,
        ]
        .iter()
        .all(|s| s.is_empty())
    }
}

/// Everything found in one reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Observations with at least one usable field, in reply order.
    pub observations: Vec<ParsedObservation>,
    /// The first non-blank summary.
    pub summary: Option<ParsedSummary>,
    /// The reply held the explicit empty answer, `<none/>` ([`EMPTY_ANSWER`]); nothing
    /// else means empty.
    pub explicit_empty: bool,
}

/// What an observation reply means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservationsOutcome {
    /// Observations to store.
    Found(Vec<ParsedObservation>),
    /// The model said nothing is worth recording.
    Empty,
    /// Neither observations nor the empty answer: a failed attempt. Holds the reason.
    Unusable(String),
}

/// What a summary reply means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SummaryOutcome {
    Found(ParsedSummary),
    Empty,
    Unusable(String),
}

impl Parsed {
    /// Classifies the reply to an observation prompt; `reply` is quoted in the reason.
    pub fn observations_outcome(self, reply: &str) -> ObservationsOutcome {
        if !self.observations.is_empty() {
            ObservationsOutcome::Found(self.observations)
        } else if self.explicit_empty {
            ObservationsOutcome::Empty
        } else {
            ObservationsOutcome::Unusable(unusable_reason(reply, "<observation>"))
        }
    }

    /// Classifies the reply to a summary prompt.
    pub fn summary_outcome(self, reply: &str) -> SummaryOutcome {
        match self.summary {
            Some(s) => SummaryOutcome::Found(s),
            None if self.explicit_empty => SummaryOutcome::Empty,
            None => SummaryOutcome::Unusable(unusable_reason(reply, "<summary>")),
        }
    }
}

fn unusable_reason(reply: &str, wanted: &str) -> String {
    let trimmed = reply.trim();
    if trimmed.is_empty() {
        return "the model's reply was empty".into();
    }
    format!(
        "the model's reply held no {wanted} and no empty answer: {:?}",
        first_words(trimmed, 200)
    )
}

/// Parses a model reply. Never fails, never panics.
pub fn parse(reply: &str) -> Parsed {
    let clean = sanitize(reply);
    let mut state = State::default();
    let mut reader = Reader::from_str(&clean);
    {
        let c = reader.config_mut();
        c.allow_dangling_amp = true;
        c.allow_unmatched_ends = true;
        c.check_end_names = false;
        c.check_comments = false;
        c.expand_empty_elements = false;
    }
    let mut last_pos = u64::MAX;
    let mut errors = 0;
    loop {
        let before = reader.buffer_position();
        match reader.read_event() {
            Ok(Event::Eof) => break,
            Ok(Event::Start(e)) => state.start(&e, false),
            Ok(Event::Empty(e)) => state.start(&e, true),
            Ok(Event::End(e)) => state.end(e.name().0),
            Ok(Event::Text(t)) => state.text(&t.xml_content(quick_xml::XmlVersion::Implicit1_0)),
            Ok(Event::CData(t)) => state.text(&t.into_inner()),
            Ok(Event::GeneralRef(r)) => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => match &*r {
                        "amp" => "&".into(),
                        "lt" => "<".into(),
                        "gt" => ">".into(),
                        "quot" => "\"".into(),
                        "apos" => "'".into(),
                        other => format!("&{other};"),
                    },
                };
                state.text(&resolved);
            }
            Ok(_) => {}
            Err(_) => {
                // The reader moves past the bad markup; stop if it cannot, or if the input
                // is hopeless, so a pathological reply cannot loop.
                errors += 1;
                let pos = reader.buffer_position();
                if pos == before || pos == last_pos || errors > 10_000 {
                    break;
                }
            }
        }
        last_pos = before;
    }
    state.finish()
}

/// Escapes `<` that cannot start markup and `&` that cannot start a reference, so the
/// reader sees prose as text.
fn sanitize(reply: &str) -> String {
    let mut out = String::with_capacity(reply.len() + 16);
    let bytes = reply.as_bytes();
    for (i, ch) in reply.char_indices() {
        match ch {
            '<' => {
                let next = bytes.get(i + 1).copied().unwrap_or(b' ');
                if next.is_ascii_alphabetic() || matches!(next, b'/' | b'!' | b'?' | b'_') {
                    out.push('<');
                } else {
                    out.push_str("&lt;");
                }
            }
            '&' => {
                if starts_reference(&reply[i + 1..]) {
                    out.push('&');
                } else {
                    out.push_str("&amp;");
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// True when `rest` (after a `&`) is `name;`, `#digits;` or `#xhex;`.
fn starts_reference(rest: &str) -> bool {
    let Some(end) = rest.find(';') else {
        return false;
    };
    if end == 0 || end > 12 {
        return false;
    }
    let name = &rest[..end];
    if let Some(num) = name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
        return !num.is_empty()
            && num.chars().all(|c| c.is_ascii_hexdigit())
            && u32::from_str_radix(num, 16)
                .ok()
                .and_then(char::from_u32)
                .is_some();
    }
    if let Some(num) = name.strip_prefix('#') {
        return !num.is_empty()
            && num.chars().all(|c| c.is_ascii_digit())
            && num.parse::<u32>().ok().and_then(char::from_u32).is_some();
    }
    matches!(name, "amp" | "lt" | "gt" | "quot" | "apos")
}

/// Text fields of an observation or a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Type,
    Title,
    Subtitle,
    Narrative,
    Request,
    Investigated,
    Learned,
    Completed,
    NextSteps,
    Notes,
}

/// List containers of an observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    Facts,
    Concepts,
    FilesRead,
    FilesModified,
}

fn field_of(name: &str) -> Option<Field> {
    Some(match name {
        "type" => Field::Type,
        "title" => Field::Title,
        "subtitle" => Field::Subtitle,
        "narrative" => Field::Narrative,
        "request" => Field::Request,
        "investigated" => Field::Investigated,
        "learned" => Field::Learned,
        "completed" => Field::Completed,
        "next_steps" | "next-steps" | "nextsteps" => Field::NextSteps,
        "notes" => Field::Notes,
        _ => return None,
    })
}

fn list_of(name: &str) -> Option<List> {
    Some(match name {
        "facts" => List::Facts,
        "concepts" => List::Concepts,
        "files_read" | "files-read" => List::FilesRead,
        "files_modified" | "files-modified" | "files_edited" => List::FilesModified,
        _ => return None,
    })
}

fn is_item(name: &str) -> bool {
    matches!(name, "fact" | "concept" | "file" | "item" | "li")
}

/// Where the parser is.
#[derive(Debug, Default)]
struct State {
    out: Parsed,
    obs: Option<ParsedObservation>,
    summary: Option<ParsedSummary>,
    field: Option<Field>,
    list: Option<List>,
    /// Text of the open field, list item or bare list text.
    buf: String,
    in_item: bool,
}

impl State {
    fn start(&mut self, e: &BytesStart, empty: bool) {
        let name = e.name().0.to_ascii_lowercase();
        match name.as_str() {
            // The one empty answer the prompts define. An `<observations>` block with no
            // `<observation>` in it is not one: it is what a model echoing the summary
            // prompt's own block sends back.
            "none" if empty => {
                self.out.explicit_empty = true;
            }
            "observation" => {
                self.close_observation();
                self.close_summary();
                let mut obs = ParsedObservation::default();
                for attr in e.attributes().flatten() {
                    if attr.key.0.eq_ignore_ascii_case("type") {
                        obs.kind = clean(
                            &attr
                                .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                                .unwrap_or_default(),
                        );
                    }
                }
                self.obs = Some(obs);
                if empty {
                    self.close_observation();
                }
            }
            "summary" => {
                self.close_observation();
                self.close_summary();
                self.summary = Some(ParsedSummary::default());
                if empty {
                    self.close_summary();
                }
            }
            n if self.obs.is_some() || self.summary.is_some() => {
                if let Some(f) = field_of(n) {
                    self.commit();
                    self.list = None;
                    self.field = Some(f);
                    if empty {
                        self.commit();
                    }
                } else if let Some(l) = list_of(n) {
                    self.commit();
                    self.list = Some(l);
                    if empty {
                        self.list = None;
                    }
                } else if is_item(n) && self.list.is_some() {
                    self.commit();
                    self.in_item = true;
                    if empty {
                        self.in_item = false;
                    }
                }
                // Any other tag inside a field is formatting: its text is kept.
            }
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "observation" => self.close_observation(),
            "summary" => self.close_summary(),
            "observations" => self.close_observation(),
            n if field_of(n).is_some() && self.field.is_some() => self.commit(),
            n if list_of(n).is_some() => {
                self.commit();
                self.list = None;
            }
            n if is_item(n) && self.in_item => self.commit(),
            _ => {}
        }
    }

    fn text(&mut self, t: &str) {
        if self.field.is_some() || self.list.is_some() {
            self.buf.push_str(t);
        }
    }

    /// Stores the open field's or item's text where it belongs.
    fn commit(&mut self) {
        let text = std::mem::take(&mut self.buf);
        if let Some(field) = self.field.take() {
            let value = clean(&text);
            if let Some(o) = self.obs.as_mut() {
                let slot = match field {
                    Field::Type => &mut o.kind,
                    Field::Title => &mut o.content.title,
                    Field::Subtitle => &mut o.content.subtitle,
                    Field::Narrative => &mut o.content.narrative,
                    _ => return,
                };
                if slot.is_empty() {
                    *slot = value;
                }
            } else if let Some(s) = self.summary.as_mut() {
                let slot = match field {
                    Field::Request => &mut s.request,
                    Field::Investigated => &mut s.investigated,
                    Field::Learned => &mut s.learned,
                    Field::Completed => &mut s.completed,
                    Field::NextSteps => &mut s.next_steps,
                    Field::Notes => &mut s.notes,
                    _ => return,
                };
                if slot.is_empty() {
                    *slot = value;
                }
            }
            return;
        }
        let Some(list) = self.list else { return };
        let was_item = std::mem::replace(&mut self.in_item, false);
        let Some(o) = self.obs.as_mut() else { return };
        let target = match list {
            List::Facts => &mut o.content.facts,
            List::Concepts => &mut o.content.concepts,
            List::FilesRead => &mut o.content.files_read,
            List::FilesModified => &mut o.content.files_modified,
        };
        // Text straight inside a list (no item tags) is read one entry per line.
        let entries: Vec<String> = if was_item {
            vec![clean(&text)]
        } else {
            text.lines()
                .map(|l| clean(l.trim().trim_start_matches(['-', '*', '•']).trim()))
                .collect()
        };
        for e in entries {
            if !e.is_empty() && !target.contains(&e) {
                target.push(e);
            }
        }
    }

    fn close_observation(&mut self) {
        self.commit();
        self.list = None;
        if let Some(mut o) = self.obs.take()
            && !o.is_blank()
        {
            o.ensure_title();
            self.out.observations.push(o);
        }
    }

    fn close_summary(&mut self) {
        if self.summary.is_none() {
            return;
        }
        self.commit();
        if let Some(s) = self.summary.take()
            && !s.is_blank()
            && self.out.summary.is_none()
        {
            self.out.summary = Some(s);
        }
    }

    fn finish(mut self) -> Parsed {
        self.close_observation();
        self.close_summary();
        self.out
    }
}

/// Collapses runs of whitespace and trims.
fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut lines = s
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "));
    // Keep paragraph breaks in long text; collapse everything else.
    let mut blank = false;
    for line in lines.by_ref() {
        if line.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank { "\n\n" } else { " " });
        }
        blank = false;
        out.push_str(&line);
    }
    out
}

/// The first `max` characters of `s`, cut at a word boundary when possible.
fn first_words(s: &str, max: usize) -> String {
    let s = s.trim();
    let head = text::head(s, max, text::Unit::Chars);
    if head.len() == s.len() {
        return s.to_string();
    }
    let head = head.rsplit_once(' ').map_or(head, |(h, _)| h);
    format!("{}…", head.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn obs(kind: &str, title: &str) -> ParsedObservation {
        ParsedObservation {
            kind: kind.into(),
            content: ObservationContent {
                title: title.into(),
                ..Default::default()
            },
        }
    }

    /// Parses `input` and compares the observations' (type, title) pairs and the empty flag.
    fn check(input: &str, expected: &[(&str, &str)], empty: bool) {
        let p = parse(input);
        let got: Vec<(String, String)> = p
            .observations
            .iter()
            .map(|o| (o.kind.clone(), o.content.title.clone()))
            .collect();
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .collect();
        assert_eq!(got, want, "input: {input}");
        assert_eq!(p.explicit_empty, empty, "empty flag for: {input}");
    }

    #[test]
    fn finds_observations_in_prose_and_fences() {
        check(
            "<observation><type>bugfix</type><title>Fix it</title></observation>",
            &[("bugfix", "Fix it")],
            false,
        );
        check(
            "Sure! Here you go:\n```xml\n<observation>\n  <type> feature </type>\n  <title>\n   Add   login\n  </title>\n</observation>\n```\nand\n<observation><type>change</type><title>B</title></observation> done.",
            &[("feature", "Add login"), ("change", "B")],
            false,
        );
        check(
            "<observation type=\"decision\"><title>Use WAL</title></observation>",
            &[("decision", "Use WAL")],
            false,
        );
    }

    #[test]
    fn tolerates_broken_markup() {
        // Bare & and <.
        check(
            "<observation><type>change</type><title>a & b < c</title></observation>",
            &[("change", "a & b < c")],
            false,
        );
        // Entities are decoded.
        check(
            "<observation><type>change</type><title>x &lt;y&gt; &amp; &#65;&#x42;</title></observation>",
            &[("change", "x <y> & AB")],
            false,
        );
        // Unclosed field: ends at the next known tag.
        check(
            "<observation><type>change<title>T</title></observation>",
            &[("change", "T")],
            false,
        );
        // Repeated observation tag without a close.
        check(
            "<observation><type>a</type><title>One</title><observation><type>b</type><title>Two</title>",
            &[("a", "One"), ("b", "Two")],
            false,
        );
        // Mismatched close tags.
        check(
            "<observation><type>change</typo><title>T</titel></observation>",
            &[("change", "T")],
            false,
        );
        // Truncated mid-field: what was there is kept.
        check(
            "<observation><type>discovery</type><title>Cut off here",
            &[("discovery", "Cut off here")],
            false,
        );
        // Missing title: taken from the narrative.
        check(
            "<observation><type>change</type><narrative>The cache was rebuilt.</narrative></observation>",
            &[("change", "The cache was rebuilt.")],
            false,
        );
        // Nothing usable inside.
        check("<observation><type>change</type></observation>", &[], false);
    }

    #[test]
    fn reads_lists_with_and_without_items() {
        let p = parse(
            "<observation><type>change</type><title>T</title>\
             <facts><fact>one</fact><fact> two </fact><fact>one</fact></facts>\
             <concepts>\n- how-it-works\n- gotcha\n</concepts>\
             <files_read><file>a.rs</file></files_read>\
             <files_modified><file>b.rs</file><file/></files_modified>\
             <narrative>Para one.\n\nPara <b>two</b>.</narrative></observation>",
        );
        let o = &p.observations[0];
        assert_eq!(o.content.facts, vec!["one", "two"]);
        assert_eq!(o.content.concepts, vec!["how-it-works", "gotcha"]);
        assert_eq!(o.content.files_read, vec!["a.rs"]);
        assert_eq!(o.content.files_modified, vec!["b.rs"]);
        assert_eq!(o.content.narrative, "Para one.\n\nPara two.");
        assert_eq!(o.content.title, "T");
    }

    #[test]
    fn explicit_empty_answers() {
        check("<none/>", &[], true);
        check("Nothing worth recording.\n<none />", &[], true);
        // An echoed block, or another self-closing tag, is not the empty answer.
        check("<observations></observations>", &[], false);
        check("<observations/>", &[], false);
        check(
            "<observations>\n- [feature] Wrote out.txt\n</observations>",
            &[],
            false,
        );
        check("<nothing/>", &[], false);
        check("no xml at all", &[], false);
        check("", &[], false);
        // Observations win over an empty marker.
        check(
            "<observations><observation><type>change</type><title>T</title></observation></observations>",
            &[("change", "T")],
            false,
        );
    }

    #[test]
    fn classifies_replies() {
        assert_eq!(
            parse("<none/>").observations_outcome("<none/>"),
            ObservationsOutcome::Empty
        );
        assert!(matches!(
            parse("I cannot help").observations_outcome("I cannot help"),
            ObservationsOutcome::Unusable(r) if r.contains("I cannot help")
        ));
        assert!(matches!(
            parse("").summary_outcome(""),
            SummaryOutcome::Unusable(r) if r.contains("empty")
        ));
        assert_eq!(
            parse("<observation><title>x</title></observation>").observations_outcome(""),
            ObservationsOutcome::Found(vec![obs("", "x")])
        );
    }

    #[test]
    fn parses_summaries() {
        let p = parse(
            "Here:\n<summary>\n<request>Add login</request><investigated>auth.rs</investigated>\
             <learned>tokens expire</learned><completed>login works</completed>\
             <next_steps>tests</next_steps><notes></notes></summary>",
        );
        assert_eq!(
            p.summary,
            Some(ParsedSummary {
                request: "Add login".into(),
                investigated: "auth.rs".into(),
                learned: "tokens expire".into(),
                completed: "login works".into(),
                next_steps: "tests".into(),
                notes: String::new(),
            })
        );
        let truncated = parse("<summary><request>R</request><completed>half");
        assert_eq!(
            truncated.summary.map(|s| (s.request, s.completed)),
            Some(("R".into(), "half".into()))
        );
        assert_eq!(parse("<summary></summary>").summary, None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn never_panics_on_arbitrary_text(s in "\\PC{0,400}") {
            let _ = parse(&s);
        }

        #[test]
        fn never_panics_on_tag_soup(parts in proptest::collection::vec(prop_oneof![
            Just("<observation>".to_string()), Just("</observation>".to_string()),
            Just("<summary>".to_string()), Just("</summary>".to_string()),
            Just("<title>".to_string()), Just("</title>".to_string()),
            Just("<facts>".to_string()), Just("<fact>".to_string()), Just("</facts>".to_string()),
            Just("<none/>".to_string()), Just("&".to_string()), Just("<".to_string()),
            Just("&#xD800;".to_string()), Just("<![CDATA[".to_string()), Just("]]>".to_string()),
            Just("<!--".to_string()), Just("<?x".to_string()), Just("\"".to_string()),
            Just("<type a='".to_string()), "[a-z ]{0,8}",
        ], 0..60)) {
            let input = parts.concat();
            let p = parse(&input);
            for o in &p.observations {
                prop_assert!(!o.content.title.is_empty());
            }
        }

        #[test]
        fn well_formed_observations_round_trip(title in "[A-Za-z][A-Za-z0-9 ,.]{0,40}", kind in "[a-z]{1,10}") {
            let xml = format!("<observation><type>{kind}</type><title>{title}</title></observation>");
            let p = parse(&xml);
            prop_assert_eq!(p.observations.len(), 1);
            prop_assert_eq!(&p.observations[0].kind, &kind);
            prop_assert_eq!(&p.observations[0].content.title, &clean(&title));
        }
    }
}
