"""The web console: server-rendered pages on the API's app (no CDN, no JavaScript at all).

``Console`` owns the shared parts — the Jinja2 environment (templates of spectral/console plus
those of each domain's ``templates`` folder), the stylesheet, login and logout, and HTML pages
for errors under ``/console``. Each domain adds its pages as a router built beside it
(consumers/rule_candidates/console.py, producers/work/console.py, spectral/ops/console.py).
"""
