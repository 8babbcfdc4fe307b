-- Model calls are recorded before they are made (outcome 'started') and completed after,
-- so a worker killed mid-call still counts the call against model.daily_token_budget,
-- by its prompt's estimate. tokens_estimated is 1 when the token counts are estimates
-- (characters / 4: a started call, or a provider that reports none) rather than the
-- provider's own.
ALTER TABLE model_calls ADD COLUMN tokens_estimated INTEGER NOT NULL DEFAULT 0;
CREATE INDEX model_calls_provider_time ON model_calls (provider, created_at);

-- The largest prompt (in characters) a provider's model is known to take, learned when it
-- rejected a larger one as too long for its context: later batches are split to fit it
-- the first time. Applies below model.max_prompt_chars, never above.
CREATE TABLE model_limits (
    provider         TEXT NOT NULL,
    model            TEXT NOT NULL,
    max_prompt_chars INTEGER NOT NULL CHECK (max_prompt_chars > 0),
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (provider, model)
) WITHOUT ROWID;
