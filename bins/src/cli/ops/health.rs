//! `cairn status`, `cairn doctor`, `cairn config`.

use cairn_core::clock;
use cairn_core::ops::doctor::{self, Level};
use cairn_core::ops::status;
use cairn_core::queue::claim::JobStatus;

use cairn_core::settings::{Settings, Source, write};

use super::{
    ConfigArgs, ConfigCommand, DoctorArgs, StatusArgs, age, bytes, emit, one_line, open, outln,
    print_json,
};
use crate::cli::Ctx;
use crate::exit;

/// `cairn status`: exit 0 healthy, 1 when something needs attention.
pub fn status(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<u8> {
    if args.acknowledge {
        let n = cairn_core::store::incidents::acknowledge(&ctx.data_dir)?;
        log::info!("acknowledged {n} item(s)");
    }
    let exists = match ctx.data_dir.db().try_exists() {
        // Not this user's to read: said below, after what the hooks kept elsewhere.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(e),
        // Nothing there (a file where a directory of the path should be).
        Err(_) => Ok(false),
        found => found,
    };
    if !matches!(exists, Ok(true)) {
        if let Some(code) = no_database_but_losses(ctx, args)? {
            return Ok(code);
        }
        if let Err(e) = exists {
            anyhow::bail!(
                "cannot look into the data dir {}: {e}; check its owner and permissions (one made by `sudo cairn …` belongs to root)",
                ctx.data_dir.root().display()
            );
        }
        // Installed (or not yet), no event so far: a normal state, not a failure.
        if args.json {
            print_json(&serde_json::json!({
                "data_dir": ctx.data_dir.root(),
                "waiting_for_first_event": true,
                "attention": [],
            }))?;
        } else {
            emit(&format!(
                "cairn status of {}\n\nno database yet: waiting for the first event (the hooks create it; `cairn install` adds them to Claude Code and creates it now; if events were expected, check CAIRN_DATA_DIR)\n",
                ctx.data_dir.root().display()
            ))?;
        }
        return Ok(exit::OK);
    }
    let conn = open(ctx)?;
    let now = clock::now_ms();
    let s = status::gather(&ctx.data_dir, &conn, ctx.settings(), now)?;
    if args.json {
        print_json(&s)?;
    } else {
        emit(&render_status(&s))?;
        if let Some(note) = provider_note(ctx, &s) {
            emit(&note)?;
        }
    }
    Ok(if s.needs_attention() {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}

/// No database, but hooks kept events outside the data dir or counted losses (the data dir
/// could not be created): that, not "waiting for the first event", is the status.
fn no_database_but_losses(ctx: &Ctx, args: &StatusArgs) -> anyhow::Result<Option<u8>> {
    let kept = status::kept_outside(&ctx.data_dir);
    let lost = cairn_core::store::incidents::lost(&ctx.data_dir);
    if kept.is_none() && lost.is_none() {
        return Ok(None);
    }
    let mut attention = Vec::new();
    if let Some((n, dir)) = &kept {
        attention.push(format!(
            "{n} hook event(s) kept in {dir} because the data dir could not be written: make it writable (`cairn doctor` says why); the worker stores them then"
        ));
    }
    if let Some(l) = &lost {
        attention.push(format!(
            "{} hook event(s) could not be kept anywhere, the last at {}: {}; then `cairn status --acknowledge`",
            l.count,
            clock::minute_utc(l.last_at),
            l.cause
        ));
    }
    if args.json {
        print_json(&serde_json::json!({
            "data_dir": ctx.data_dir.root(),
            "spooled_outside": kept.as_ref().map_or(0, |k| k.0),
            "outside_dir": kept.as_ref().map(|k| &k.1),
            "lost": lost,
            "attention": attention,
        }))?;
    } else {
        let mut text = format!(
            "cairn status of {}\n\nno database: the data dir could not be written\n\nneeds attention:\n",
            ctx.data_dir.root().display()
        );
        for a in &attention {
            text.push_str(&format!("  - {a}\n"));
        }
        emit(&text)?;
    }
    Ok(Some(exit::NEGATIVE))
}

fn render_status(s: &status::Status) -> String {
    let mut out = format!("cairn status of {}\n\n", s.data_dir);
    let w = &s.worker;
    let heartbeat = match w.heartbeat_age_ms {
        Some(a) => format!("last heartbeat {} ago", age(a)),
        None => "no heartbeat recorded".into(),
    };
    let uses = match (&w.provider, &w.model) {
        (Some(p), Some(m)) => format!(", provider {p} ({m})"),
        _ => String::new(),
    };
    let worker = match (w.running, w.pid) {
        (true, Some(pid)) if w.process_stopped => {
            format!("pid {pid} holds the lock but is stopped, {heartbeat}{uses}")
        }
        (true, Some(pid)) => format!(
            "running, pid {pid}, up {}, {heartbeat}{uses}",
            age(w.uptime_ms.unwrap_or(0))
        ),
        _ => format!("not running ({heartbeat})"),
    };
    out.push_str(&format!("{:<11}{worker}\n", "worker"));
    let q = &s.queue;
    let mut queue = JobStatus::ALL
        .iter()
        .map(|st| format!("{} {}", st.as_str(), q.count(*st)))
        .collect::<Vec<_>>()
        .join(" · ");
    if let Some(a) = q.oldest_pending_age_ms {
        queue.push_str(&format!("; oldest pending {}", age(a)));
    }
    out.push_str(&format!("{:<11}{queue}\n", "queue"));
    if let Some(d) = &s.next_due {
        out.push_str(&format!(
            "{:<11}job #{} {}\n",
            "next",
            d.job_id,
            super::queue::why_waiting(d.wait, s.now)
        ));
    }
    for job in &q.recent_skipped {
        out.push_str(&format!(
            "{:<11}#{} {} of session {} turn {}: {}\n",
            "skipped",
            job.id,
            job.kind.as_str(),
            job.session_id,
            job.prompt_number,
            one_line(
                job.last_error.as_deref().unwrap_or("no error recorded"),
                100
            )
        ));
    }
    if s.quarantined > 0 {
        out.push_str(&format!(
            "{:<11}{} hook input{} kept aside (`cairn quarantine list`)\n",
            "quarantine",
            s.quarantined,
            if s.quarantined == 1 { "" } else { "s" }
        ));
        for q in &s.recent_quarantine {
            out.push_str(&format!(
                "{:<11}#{} {} at {}: {} ({} bytes)\n",
                "",
                q.id,
                q.event.as_deref().unwrap_or("unknown event"),
                clock::iso_utc(q.created_at),
                one_line(&q.reason, 100),
                q.raw_len
            ));
        }
    }
    let budget = match (s.daily_token_budget, s.budget_spent_until) {
        (0, _) => "no daily budget".to_string(),
        (b, None) => format!("budget {b}"),
        (b, Some(until)) => format!(
            "budget {b} spent: jobs wait until {} (raise model.daily_token_budget to go on now)",
            clock::iso_utc(until)
        ),
    };
    out.push_str(&format!(
        "{:<11}{} today (UTC), {budget}\n",
        "tokens", s.tokens_today
    ));
    for p in &s.model_calls_last_day {
        let t = &p.totals;
        let mut line = format!(
            "{:<11}{} {}: {} calls in 24h, {} input + {} output tokens",
            "model", p.provider, p.model, t.calls, t.input_tokens, t.output_tokens
        );
        if p.estimated > 0 {
            line.push_str(&format!(" ({} calls estimated)", p.estimated));
        }
        if p.cost_usd > 0.0 {
            line.push_str(&format!(", ${:.4}", p.cost_usd));
        }
        if t.failed > 0 {
            line.push_str(&format!(", {} failed", t.failed));
        }
        if p.unfinished > 0 {
            line.push_str(&format!(", {} never completed", p.unfinished));
        }
        out.push_str(&line);
        out.push('\n');
    }
    let m = &s.memories;
    out.push_str(&format!(
        "{:<11}{} sessions · {} prompts · {} observations · {} summaries\n",
        "memories", m.sessions, m.prompts, m.observations, m.summaries
    ));
    let search = match (&s.search.model, &s.search.unavailable) {
        (Some(model), _) => format!(
            "by words and meaning ({model}): {} memories have vectors, {} waiting",
            s.search.embedded, s.search.queued
        ),
        (None, Some(why)) => format!("by words only: {why}"),
        (None, None) => "by words only".into(),
    };
    out.push_str(&format!("{:<11}{search}\n", "search"));
    if let Some(sync) = &s.sync {
        let line = cairn_core::sync::live::summary(sync, s.now);
        out.push_str(&format!("{:<11}{line}\n", "sync"));
    }
    let database = match &s.read_only {
        Some(why) => format!("{}, read-only ({why})", bytes(s.database_bytes)),
        None => bytes(s.database_bytes),
    };
    out.push_str(&format!("{:<11}{database}\n", "database"));
    if s.spooled > 0 {
        out.push_str(&format!(
            "{:<11}{} hook events waiting for the worker\n",
            "spool", s.spooled
        ));
    }
    if let (1.., Some(outside)) = (s.spooled_outside, &s.outside_dir) {
        out.push_str(&format!(
            "{:<11}{} hook events kept in {outside} while the data dir could not be written\n",
            "", s.spooled_outside
        ));
    }
    if !s.given_last_week.is_empty() {
        use cairn_core::memory::told::Moment;
        let parts: Vec<String> = s
            .given_last_week
            .iter()
            .map(|t| {
                let at = match t.moment {
                    Some(Moment::SessionStart) => "in session start indexes",
                    Some(Moment::Prompt) => "with prompts",
                    Some(Moment::File) => "before file reads and edits",
                    None => "elsewhere",
                };
                format!(
                    "{} {at} ({} sessions, {} tokens)",
                    t.memories, t.sessions, t.tokens
                )
            })
            .collect();
        out.push_str(&format!(
            "{:<11}memories given in the last 7 days: {}\n",
            "given",
            parts.join(" · ")
        ));
    }
    if s.recovered_last_week > 0 {
        out.push_str(&format!(
            "{:<11}{} events the hooks missed, recovered from transcripts in the last 7 days\n",
            "recovered", s.recovered_last_week
        ));
    }
    if s.waiting_for_first_event() {
        out.push_str(&format!(
            "{:<11}waiting for the first event (start a Claude Code session)\n",
            "capture"
        ));
    }
    if s.attention.is_empty() {
        out.push_str("\nall good\n");
    } else {
        out.push_str("\nneeds attention:\n");
        for a in &s.attention {
            out.push_str(&format!("  - {a}\n"));
        }
    }
    out
}

/// A note when this shell's environment would pick another provider than the one the
/// running worker uses (it chose from its own environment, e.g. Claude Code's).
fn provider_note(ctx: &Ctx, s: &status::Status) -> Option<String> {
    let worker = s.worker.provider.as_deref().filter(|_| s.worker.running)?;
    let env = |k: &str| std::env::var(k).ok();
    let shell = cairn_core::worker::model::resolve(&ctx.settings().model, &env).provider;
    (shell != worker).then(|| {
        format!(
            "note: this shell's environment would pick the {shell} provider; the running worker, started with another environment, uses {worker} (`cairn doctor` says more)\n"
        )
    })
}

/// `cairn doctor`: exit 0 when nothing failed, 1 when a check failed, 2 when the database
/// cannot be used at all (after printing the other findings).
pub fn doctor(ctx: &Ctx, args: &DoctorArgs) -> anyhow::Result<u8> {
    let env = doctor::Env {
        home: std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(Into::into),
        cwd: std::env::current_dir().unwrap_or_default(),
        vars: std::env::vars().collect(),
        online: args.online,
    };
    let findings = doctor::run(
        &ctx.data_dir,
        ctx.settings(),
        &ctx.loaded.warnings,
        &env,
        clock::now_ms(),
    );
    if args.json {
        print_json(&findings)?;
    } else {
        let mut o = String::new();
        for f in &findings {
            outln!(o, "{:<5} {:<12} {}", f.level.as_str(), f.check, f.message);
            if let Some(fix) = &f.fix {
                outln!(o, "{:<18} → {fix}", "");
            }
        }
        emit(&o)?;
    }
    let unusable = findings
        .iter()
        .find(|f| (f.check == "database" || f.check == "schema") && f.level == Level::Fail);
    if let Some(f) = unusable {
        anyhow::bail!("{}; {}", f.message, f.fix.as_deref().unwrap_or("see above"));
    }
    Ok(if doctor::any_failed(&findings) {
        exit::NEGATIVE
    } else {
        exit::OK
    })
}

/// `cairn config`: every effective setting and where it came from; `set` and `unset`
/// change one (`settings::write`).
pub fn config(ctx: &Ctx, args: &ConfigArgs) -> anyhow::Result<u8> {
    if let Some(c) = &args.change {
        return change(ctx, c);
    }
    let rows = ctx.loaded.effective();
    if args.json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(k, v, src)| {
                serde_json::json!({ "key": k, "value": v, "source": src.to_string() })
            })
            .collect();
        print_json(&serde_json::json!({
            "data_dir": ctx.data_dir.root(),
            "settings_file": ctx.data_dir.settings(),
            "settings": list,
            "warnings": ctx.loaded.warnings,
        }))?;
        return Ok(exit::OK);
    }
    let mut o = String::new();
    outln!(o, "data dir       {}", ctx.data_dir.root().display());
    outln!(o, "settings file  {}", ctx.data_dir.settings().display());
    outln!(o);
    let width = rows.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
    let values: Vec<String> = rows
        .iter()
        .map(|(k, v, _)| match v {
            serde_json::Value::String(s) if s.is_empty() => with_meaning(ctx, k, "\"\"".into()),
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let vwidth = values
        .iter()
        .map(|v| v.chars().count().min(40))
        .max()
        .unwrap_or(0);
    for ((k, _, src), v) in rows.iter().zip(&values) {
        outln!(o, "{k:<width$}  {v:<vwidth$}  {src}");
    }
    for w in &ctx.loaded.warnings {
        outln!(o, "warning: {w}");
    }
    emit(&o)?;
    Ok(exit::OK)
}

/// `shown`, the empty value of `key`, followed by what it stands for when the key takes
/// one (as each setting's description says).
fn with_meaning(ctx: &Ctx, key: &str, shown: String) -> String {
    let means = match key {
        "embed.model_dir" => cairn_core::recall::embed::model::model_dir(
            &cairn_core::settings::EmbedSettings::default(),
            &ctx.data_dir,
        )
        .display()
        .to_string(),
        "embed.base_url" => "OpenAI's, with embed.provider openai".into(),
        "embed.model" => "none; embed.provider openai needs one".into(),
        "model.model" => "the provider's default".into(),
        "model.base_url" => "the provider's default, or ANTHROPIC_BASE_URL".into(),
        _ => return shown,
    };
    format!("{shown} ({means})")
}

/// `cairn config set` / `unset`: one change through the settings writer, then what it did
/// and whether an environment variable hides it.
fn change(ctx: &Ctx, command: &ConfigCommand) -> anyhow::Result<u8> {
    let change = match command {
        ConfigCommand::Set { key, value } => write::Change::Set {
            key: key.clone(),
            value: value.clone(),
        },
        ConfigCommand::Unset { key } => write::Change::Unset { key: key.clone() },
    };
    ctx.data_dir.ensure()?;
    let file = ctx.data_dir.settings();
    let written =
        write::apply(&file, &change).map_err(|e| anyhow::anyhow!("{e}; nothing was written"))?;
    let key = &written.key;
    let shown = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) if s.is_empty() => with_meaning(ctx, key, "\"\"".into()),
        serde_json::Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    let mut o = String::new();
    match (&written.before, &written.after) {
        (_, Some(after)) if written.unchanged() => {
            outln!(
                o,
                "{key} is already {} in {}",
                shown(after),
                written.file.display()
            );
        }
        (None, None) => outln!(
            o,
            "{key} is not set in {}: it is its default, {}",
            written.file.display(),
            shown(&written.effective)
        ),
        (Some(before), None) => outln!(
            o,
            "{key} unset in {} (was {}): back to its default, {}",
            written.file.display(),
            shown(before),
            shown(&written.effective)
        ),
        (before, Some(after)) => outln!(
            o,
            "{key} = {} in {}{}",
            shown(after),
            written.file.display(),
            before
                .as_ref()
                .map(|b| format!(" (was {})", shown(b)))
                .unwrap_or_default()
        ),
    }
    // A list set over its default replaces it: say what the default held that is gone.
    if written.before.is_none()
        && let Some(serde_json::Value::Array(after)) = &written.after
        && let Some(serde_json::Value::Array(default)) = cairn_core::settings::default_of(key)
    {
        let dropped: Vec<String> = default
            .iter()
            .filter(|d| !after.contains(d))
            .map(shown)
            .collect();
        if !dropped.is_empty() {
            outln!(
                o,
                "note: this replaces the default list; no longer in it: {} (list them too to keep them)",
                dropped.join(", ")
            );
        }
    }
    // The environment wins over the file: say so, or the change seems not to work.
    if let Ok(now) = Settings::load(&ctx.data_dir)
        && let Some(Source::Env(var)) = now.sources.get(key.as_str())
    {
        let value = now
            .effective()
            .into_iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, v, _)| shown(&v))
            .unwrap_or_default();
        outln!(
            o,
            "note: {var} is set in the environment, so {key} stays {value} until it is unset"
        );
    }
    emit(&o)?;
    Ok(exit::OK)
}
