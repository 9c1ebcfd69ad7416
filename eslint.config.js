// ESLint for the page's scripts (app/static/) and their unit tests (tests/js/): `npx eslint app/static tests/js`
const js = require("@eslint/js");
const globals = require("globals");

module.exports = [
  js.configs.recommended,
  {
    files: ["app/static/**/*.js"],
    languageOptions: {ecmaVersion: 2022, sourceType: "script", globals: {...globals.browser}},
    rules: {eqeqeq: ["error", "smart"], "prefer-const": "error", "no-var": "error"},
  },
  {
    // run by gr.HTML(js_on_load=...): a function body given the component's element, props, trigger and watch,
    // after the `const RX = {...};` line of Python's constants (app/assets.py with_constants)
    files: ["app/static/page.js", "app/static/timeline.js", "app/static/token_click.js", "app/static/race_app.js",
            "app/static/round_list.js", "app/static/glossary.js"],
    languageOptions: {
      globals: {RX: "readonly", element: "readonly", props: "readonly", trigger: "readonly", watch: "readonly"},
    },
  },
  {
    // a browser script that Node's tests also require (UMD)
    files: ["app/static/rounds.js"],
    languageOptions: {globals: {module: "readonly"}},
  },
  {
    files: ["tests/js/**/*.js", "eslint.config.js"],
    languageOptions: {ecmaVersion: 2022, sourceType: "commonjs", globals: {...globals.node}},
  },
];
