// ESLint for the dashboard's own JavaScript (`npm run lint`, docs/dashboard.md).
// static/js/ is browser ES modules; tests/ and this file run under Node.
import js from "@eslint/js";
import globals from "globals";

export default [
  // Third-party code: installed by npm or copied there by setup.py.
  { ignores: ["node_modules/", "vendor/", ".vendor-*/"] },
  js.configs.recommended,
  {
    files: ["**/*.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module" },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      "no-unused-vars": ["error", { args: "after-used", ignoreRestSiblings: true }],
      eqeqeq: ["error", "always"],
      // Inert for ES modules (their top level is not global); guards any classic script.
      "no-implicit-globals": "error",
      "prefer-const": "error",
      "no-var": "error",
      "no-shadow": ["error", { builtinGlobals: false }],
      // Same-scope use before the declaration (a TDZ ReferenceError at load time);
      // a use inside a function that runs later is fine.
      "no-use-before-define": ["error", { functions: false, classes: false, variables: false }],
      "no-promise-executor-return": "error",
      "no-unmodified-loop-condition": "error",
      "no-self-compare": "error",
      "no-template-curly-in-string": "error",
      "no-unreachable-loop": "error",
      "array-callback-return": "error",
      "default-param-last": "error",
      "no-constructor-return": "error",
      "no-new-wrappers": "error",
      "no-throw-literal": "error",
      radix: "error",
    },
  },
  {
    files: ["static/js/**/*.js"],
    languageOptions: { globals: globals.browser },
  },
  {
    files: ["tests/**/*.js", "eslint.config.js"],
    languageOptions: { globals: globals.node },
  },
];
