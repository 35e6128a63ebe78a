-- A message delivered without waking its recipient (a quiet report, a
-- notice during shutdown: R108, R118) stays quiet when a crash
-- leaves it in the inbox: recovery starts nothing for it.
ALTER TABLE inbox ADD COLUMN quiet boolean NOT NULL DEFAULT false;
