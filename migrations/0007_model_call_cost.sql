-- What a model call cost in US dollars, when the provider says (the claude CLI reports
-- total_cost_usd with every answer); NULL when it does not. Calls that found the provider
-- not logged in have outcome 'not_logged_in': their jobs wait, no attempt is counted.
ALTER TABLE model_calls ADD COLUMN cost_usd REAL;
