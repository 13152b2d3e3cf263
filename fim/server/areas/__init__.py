"""The route areas of `fim serve`, one file each (see `fim.server.area`); the app is
assembled from the list `fim.server.app.AREAS`."""
