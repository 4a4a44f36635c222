"""The embedded scenario: a model preset, a warm-up source and a traffic profile, run through tokenspeed_mla."""
