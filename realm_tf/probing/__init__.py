"""Knowledge probing of a pre-trained REALM: cloze texts filled with their evidence
(`probe_lib`; the binary is `realm-probe`)."""
