/** Where the package says what it could not do for a caller who is no longer waiting. */
export interface Logger {
  warn(message: string): void;
  debug?(message: string): void;
}

/** Warnings to stderr, nothing else. */
export const stderrLogger: Logger = {
  warn(message: string): void {
    console.warn(`proxypool: ${message}`);
  },
};
