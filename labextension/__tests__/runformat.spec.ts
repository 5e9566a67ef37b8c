import {
  formatBytes,
  formatMetric,
  formatProgress,
  formatValue,
  metricNumber
} from '../render/format';

describe('metric values', () => {
  it('reads the strings JSON uses for NaN and the infinities', () => {
    expect(metricNumber(0.5)).toBe(0.5);
    expect(metricNumber('Infinity')).toBe(Infinity);
    expect(metricNumber('-Infinity')).toBe(-Infinity);
    expect(metricNumber('NaN')).toBeNaN();
    expect(metricNumber('0.5')).toBeNaN(); // only numbers and the three words are values
  });

  it('says NaN and infinities as such, numbers with 4 significant digits', () => {
    expect(formatMetric('NaN')).toBe('NaN');
    expect(formatMetric('Infinity')).toBe('∞');
    expect(formatMetric('-Infinity')).toBe('−∞');
    expect(formatMetric(0.123456)).toBe('0.1235');
    expect(formatMetric(42)).toBe('42');
    expect(formatMetric(1234.5678)).toBe('1235');
    expect(formatMetric(0.00001234)).toBe('1.23e-5');
    expect(formatMetric(0)).toBe('0');
  });

  it('writes hparams as text, numbers like metrics, the rest as JSON', () => {
    expect(formatValue('adam')).toBe('adam');
    expect(formatValue(0.1)).toBe('0.1');
    expect(formatValue(true)).toBe('true');
    expect(formatValue([32, 64])).toBe('[32,64]');
    expect(formatValue(null)).toBe('–');
  });
});

describe('sizes and progress', () => {
  it('gives sizes in binary units', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.50 KB');
    expect(formatBytes(3 * 1024 * 1024)).toBe('3.00 MB');
  });

  it('says the step, the total with a percentage, and the time left when known', () => {
    expect(formatProgress({ step: null, total_steps: null, eta_seconds: null })).toBe('');
    expect(formatProgress({ step: 7, total_steps: null, eta_seconds: null })).toBe('step 7');
    expect(formatProgress({ step: 40, total_steps: 100, eta_seconds: 65 })).toBe(
      'step 40 / 100 (40%), about 1m 05s left'
    );
    expect(formatProgress({ step: 120, total_steps: 100, eta_seconds: null })).toBe(
      'step 120 / 100 (100%)'
    );
  });
});
