"""What every network surface shares: the app factory, request guard, problem documents,
bearer/cookie authentication with scopes, opaque cursors, and the pools a surface acts through.
Routers live beside their domain and are composed in spectral/cli/api.py."""
