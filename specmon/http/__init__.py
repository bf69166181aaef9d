"""specmon's one HTTP stack: every request to a server, Prometheus or a router goes through `client.HttpClient`
(async) or `blocking.BlockingFetcher` (threads without a loop), over aiohttp.

Every URL is checked, and the proxy rule kept, by `specmon.urls` (a layer below); `headers` checks header values
and builds the secret header; `decode` undoes a body's Content-Encoding within a size bound; `errors` are the exceptions callers catch.
Nothing here is imported by this file: a command that sends nothing does not load aiohttp.
"""
