"""Single-page-app hosts: every page is the same HTML shell, and its content and links exist only after
its script runs.

The shell (`shell`) holds an empty `<div id="root">`, a `<noscript>` asking for JavaScript, the host's
shared script `/static/app.js` and style sheet `/static/app.css`, the same bytes on every page of every
such host. The script reads the page's JSON from `/api/page?path=P` (title, text, the first half of its
links) and renders it; the other half comes from `/api/more?path=P` only when the element at the end
of the page, below a tall spacer, scrolls into view (lazy loading). Its links are plain `<a href>` that
it routes on the client (`history.pushState`), as single-page-app routers do.

A web with SPA hosts (`WebPolicy.spa_share`) gives them no sitemap, and the links other hosts hold to
them all go to `/`: a crawler that does not run scripts reaches their home page and nothing else.
"""
from __future__ import annotations

import hashlib
import json
from typing import Final
from urllib.parse import parse_qs

SCRIPT_PATH: Final = "/static/app.js"
STYLE_PATH: Final = "/static/app.css"
API_PAGE: Final = "/api/page"
API_MORE: Final = "/api/more"
LINKS_PER_PAGE: Final = 24   # links each page shows once rendered, half of them after scrolling

SHELL: Final = (
    b'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Loading</title>'
    b'<link rel="stylesheet" href="' + STYLE_PATH.encode() + b'">'
    b'<script defer src="' + SCRIPT_PATH.encode() + b'"></script></head>'
    b'<body><noscript>You need to enable JavaScript to run this app.</noscript>'
    b'<div id="root"></div></body></html>')

SCRIPT: Final = b"""(function () {
  var root = document.getElementById('root');
  function add(list, links) {
    links.forEach(function (url) {
      var item = document.createElement('li');
      var a = document.createElement('a');
      a.href = url;
      a.textContent = url;
      a.addEventListener('click', function (event) {
        if (a.host === location.host) {
          event.preventDefault();
          history.pushState(null, '', a.pathname);
          show(a.pathname);
        }
      });
      item.appendChild(a);
      list.appendChild(item);
    });
  }
  function show(path) {
    fetch('/api/page?path=' + encodeURIComponent(path)).then(function (r) { return r.json(); }).then(function (page) {
      document.title = page.title;
      root.innerHTML = '';
      var heading = document.createElement('h1');
      heading.textContent = page.title;
      var text = document.createElement('p');
      text.textContent = page.text;
      var list = document.createElement('ul');
      var spacer = document.createElement('div');
      spacer.className = 'spacer';
      var end = document.createElement('div');
      end.id = 'more';
      [heading, text, list, spacer, end].forEach(function (node) { root.appendChild(node); });
      add(list, page.links);
      var seen = new IntersectionObserver(function (entries) {
        if (entries.some(function (e) { return e.isIntersecting; })) {
          seen.disconnect();
          fetch(page.more).then(function (r) { return r.json(); }).then(function (more) { add(list, more.links); });
        }
      });
      seen.observe(end);
    });
  }
  window.addEventListener('popstate', function () { show(location.pathname); });
  show(location.pathname);
})();
"""

STYLE: Final = b"body{font-family:sans-serif;margin:2em}.spacer{height:4000px}#more{height:1px}\n"


def page_json(path: str, title: str, links: list[str]) -> bytes:
    """`/api/page`'s answer for the page at `path`: its title, a text of its own, the first half of
    its links and where the rest are."""
    half = len(links) // 2
    words = hashlib.sha1(path.encode()).hexdigest()
    text = f"{title}. This page is rendered in the browser; its reference is {words}."
    return json.dumps({"title": title, "text": text, "links": links[:half],
                       "more": f"{API_MORE}?path={path}"}).encode()


def more_json(links: list[str]) -> bytes:
    """`/api/more`'s answer: the second half of the page's links."""
    return json.dumps({"links": links[len(links) // 2:]}).encode()


def api_path(query: str) -> str | None:
    """The page path an API request asks about (`?path=/x`), or None when it names none."""
    values = parse_qs(query).get("path") or []
    path = values[0] if values else ""
    return path if path.startswith("/") else None


def title_of(host_name: str, path: str) -> str:
    return f"{host_name} {path}"
