-- The model provider and model each worker uses, as it built them from its own settings
-- and environment (at start and at each settings reload): `cairn status` and `cairn
-- doctor` report these, not what the shell running them would pick. NULL for workers of
-- older versions.
ALTER TABLE workers ADD COLUMN provider TEXT;
ALTER TABLE workers ADD COLUMN model TEXT;
