"""Where records live: the Store interface and its file, S3 and memory stores."""
