/** Jest: unit tests of the lab extension's pure logic (labextension/__tests__). */
module.exports = {
  testEnvironment: 'node',
  // Only the sources: never scan .venv, node_modules or build output inside the checkout.
  roots: ['<rootDir>/labextension'],
  testRegex: 'labextension/.*/.*.spec.ts[x]?$',
  modulePathIgnorePatterns: ['<rootDir>/jupyter_disttrain', '<rootDir>/lib'],
  transform: {
    '^.+\\.tsx?$': [
      'ts-jest',
      {
        tsconfig: {
          target: 'ES2018',
          module: 'commonjs',
          strict: true,
          types: ['jest', 'node'],
          esModuleInterop: true
        }
      }
    ]
  }
};
