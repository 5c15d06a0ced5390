"""gevent I/O: the HTTP transport, sockets with receive stamps, and the server-metrics scraper."""
