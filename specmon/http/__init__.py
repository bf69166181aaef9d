"""specmon's one HTTP stack: every request to a server, Prometheus or a router goes through `client.HttpClient`
(async) or `blocking.BlockingFetcher` (threads without a loop), over aiohttp.

`urls` checks every URL and holds the proxy rule; `headers` checks header values and builds the secret header;
`decode` undoes a body's Content-Encoding within a size bound; `errors` are the exceptions callers catch.
Nothing here is imported by this file: a command that sends nothing does not load aiohttp.
"""
