package view

import (
	"embed"
	"io/fs"
)

// The pages: one HTML shell, its script and style, and the vendored
// Apache ECharts and Cytoscape.js builds (web/package.json and
// package-lock.json pin them; web/vendor.sh copies them from npm).
//
//go:embed web/index.html web/app.js web/app.css web/vendor/*.js web/vendor/LICENSE.*
var web embed.FS

// Assets are the pages the view serves, rooted at web/.
func Assets() fs.FS {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		return web // unreachable: "web" is a valid path
	}
	return sub
}
