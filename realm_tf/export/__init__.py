"""SavedModel exports of the REALM towers."""
