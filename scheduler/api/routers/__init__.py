"""Thin routers: parse the request, call one service method, return its dict."""
