"""`legorl dashboard`: aiohttp server + static page (own SVG charts, no CDN)."""
