// A browser's view of `specmon monitor --web`: headless Chromium (Debian's) through playwright-core clicks the
// textual-serve start button and saves a PNG.  npm install playwright-core; node scripts/web_screenshot.js URL OUT.png
const { chromium } = require('playwright-core');
(async () => {
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
  const page = await browser.newPage({ viewport: { width: 1600, height: 960 } });
  await page.goto(process.argv[2]);
  await page.click('text=specmon');
  await page.waitForTimeout(12000);
  await page.screenshot({ path: process.argv[3] });
  await browser.close();
})().catch(e => { console.error(e); process.exit(1); });
