"""What the app shows, as pure state: the server view and its rules (state.py), and the log feed (log_feed.py)."""
