"""One router per area; app.main only assembles them."""
